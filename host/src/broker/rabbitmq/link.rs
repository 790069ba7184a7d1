//! The link to the broker: the current [`Session`], the topology declared through it,
//! and the supervisor that replaces a session whose connection dropped.
//!
//! Contract:
//! - at most one supervisor per link reconnects, one attempt at a time, with the
//!   jittered exponential [`ReconnectBackoff`](super::ReconnectBackoff);
//! - a new session is handed out only after the known work queues are declared on
//!   it again, so nothing published or consumed through it finds a queue missing;
//! - callers that see a connection fail report it ([`Link::suspect`]) and wait for
//!   the next session instead of failing, for at most the outage timeout;
//! - with several broker nodes (a cluster), the first reachable one in the list is used,
//!   and each reconnection attempt goes to the node after the one tried last, so a node
//!   that is gone costs one attempt of the backoff, not the whole outage;
//! - closing waits (up to [`SETTLE_GRACE`]) for the consumers' settling tasks to send their
//!   last acks, so a graceful stop does not hand back jobs that were done.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use jobhost_sdk::QueueConfig;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep, timeout_at};
use tokio_util::task::TaskTracker;

use super::RabbitMqOptions;
use super::holds::Holds;
use super::nodes::Nodes;
use super::session::{Failure, Session};
use crate::broker::BrokerError;
use crate::telemetry::Event;

/// How often the supervisor looks at the connection even when nothing reported a
/// failure, because not every way a connection ends raises an event.
const HEALTH_CHECK: Duration = Duration::from_secs(1);

/// How long closing waits for the settling tasks' last frames: one write each, unless
/// the connection is already gone, when they fail at once.
const SETTLE_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
enum State {
    Up(Arc<Session>),
    Down,
    Closed,
}

/// Shared by a backend, its consumers and its supervisor.
#[derive(Debug)]
pub(super) struct Link {
    /// The broker nodes; their URLs carry credentials and are only shown redacted.
    nodes: Nodes,
    pub(super) options: RabbitMqOptions,
    state: watch::Sender<State>,
    /// Every work queue declared through this link, re-declared after a reconnect.
    topology: Mutex<Vec<QueueConfig>>,
    /// The hold queues published into: declared, counted and swept through it.
    pub(super) holds: Holds,
    /// The settling tasks of the consumers' channels (see `acks`), which closing waits for.
    pub(super) settling: TaskTracker,
    wake: Notify,
}

impl Link {
    /// Open the first session on the first node of `nodes` that answers; no node
    /// reachable now is an error naming each node and why.
    pub(super) async fn connect(
        nodes: Nodes,
        options: RabbitMqOptions,
    ) -> Result<Arc<Self>, BrokerError> {
        let mut failures = Vec::new();
        let mut opened = None;
        for node in 0..nodes.len() {
            match Session::open(nodes.url(node), node, &options, 0).await {
                Ok(session) => {
                    opened = Some(session);
                    break;
                }
                Err(error) => failures.push(format!("`{}`: {error}", nodes.shown(node))),
            }
        }
        let Some(session) = opened else {
            return Err(BrokerError::Connection(format!(
                "cannot connect to {}",
                failures.join("; ")
            )));
        };
        tracing::info!(broker = %nodes.shown(session.node), "connected to the broker");
        Ok(Arc::new(Self {
            nodes,
            options,
            state: watch::Sender::new(State::Up(Arc::new(session))),
            topology: Mutex::new(Vec::new()),
            holds: Holds::default(),
            settling: TaskTracker::new(),
            wake: Notify::new(),
        }))
    }

    /// The current session, waiting through an outage; [`BrokerError::Closed`] once the
    /// link is closed.
    pub(super) async fn session(&self) -> Result<Arc<Session>, BrokerError> {
        let mut state = self.state.subscribe();
        loop {
            match &*state.borrow_and_update() {
                State::Up(session) if session.is_connected() => return Ok(Arc::clone(session)),
                State::Up(_) => self.suspect(),
                State::Down => {}
                State::Closed => return Err(BrokerError::Closed),
            }
            state.changed().await.map_err(|_| BrokerError::Closed)?;
        }
    }

    /// Tell the supervisor that the connection looked broken, so it checks now rather
    /// than at its next health check.
    pub(super) fn suspect(&self) {
        self.wake.notify_one();
    }

    /// Remember a declared work queue for re-declaration after a reconnect.
    pub(super) fn remember(&self, config: &QueueConfig) {
        let mut topology = self.topology.lock().expect("topology poisoned");
        match topology.iter_mut().find(|known| known.name == config.name) {
            Some(known) => *known = config.clone(),
            None => topology.push(config.clone()),
        }
    }

    /// The configuration `queue` was declared with through this link.
    pub(super) fn known(&self, queue: &str) -> Option<QueueConfig> {
        self.topology
            .lock()
            .expect("topology poisoned")
            .iter()
            .find(|known| known.name == queue)
            .cloned()
    }

    /// Run `attempt` on the current session until it succeeds or fails for good,
    /// waiting through reconnects for at most the outage timeout.
    pub(super) async fn run<T, F, Fut>(&self, attempt: F) -> Result<T, BrokerError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let limit = self.options.outage_timeout;
        let deadline = Instant::now() + limit;
        let unreachable = || {
            BrokerError::Connection(format!(
                "broker `{}` unavailable for {limit:?}",
                self.nodes.shown_all()
            ))
        };
        let mut failures = 0;
        loop {
            let session = timeout_at(deadline, self.session())
                .await
                .map_err(|_| unreachable())??;
            let error = match timeout_at(deadline, attempt(session))
                .await
                .map_err(|_| unreachable())?
            {
                Ok(value) => return Ok(value),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Lost(error)) => error,
            };
            tracing::debug!(broker = %self.nodes.shown_all(), %error, "broker operation interrupted, trying again");
            self.suspect();
            let pause = self.options.backoff.delay(failures);
            if Instant::now() + pause >= deadline {
                return Err(BrokerError::Connection(format!(
                    "broker `{}`: {error}",
                    self.nodes.shown_all()
                )));
            }
            sleep(pause).await;
            failures += 1;
        }
    }

    /// Run `attempt` on the current session until it succeeds, for as long as it takes,
    /// pausing by the reconnect backoff between tries (`what` names it in the log); only
    /// [`BrokerError::Closed`] ends the wait. For what must be there again after a
    /// reconnect, such as a consumer's subscription.
    pub(super) async fn keep_trying<T, F, Fut>(
        &self,
        what: &str,
        attempt: F,
    ) -> Result<T, BrokerError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut failures = 0;
        loop {
            match attempt(self.session().await?).await {
                Ok(value) => return Ok(value),
                Err(Failure::Final(error)) => tracing::error!(%error, "{what} failed"),
                Err(Failure::Lost(error)) => {
                    tracing::debug!(%error, "{what} was interrupted");
                    self.suspect();
                }
            }
            sleep(self.options.backoff.delay(failures)).await;
            failures += 1;
        }
    }

    /// Stop: waiters get [`BrokerError::Closed`], the supervisor ends, and the
    /// connection closes.
    pub(super) async fn close(&self) {
        if let Some(session) = self.shut() {
            self.close_session(session).await;
        }
    }

    /// Close `session`, which [`Link::shut`] returned, once the settling tasks are done.
    pub(super) async fn close_session(&self, session: Arc<Session>) {
        self.settled().await;
        session.close().await;
    }

    /// Wait, up to [`SETTLE_GRACE`], until every settling task has sent its last frame.
    /// A task ends once its channel's deliveries and consumer are all gone.
    async fn settled(&self) {
        self.settling.close();
        if tokio::time::timeout(SETTLE_GRACE, self.settling.wait())
            .await
            .is_err()
        {
            tracing::debug!(
                tasks = self.settling.len(),
                "closing before every settlement was sent; the broker redelivers what was not"
            );
        }
    }

    /// Mark the link closed without waiting; returns the session that was current, for
    /// the caller to close.
    pub(super) fn shut(&self) -> Option<Arc<Session>> {
        let previous = self.state.send_replace(State::Closed);
        self.wake.notify_one();
        match previous {
            State::Up(session) => Some(session),
            State::Down | State::Closed => None,
        }
    }

    fn is_closed(&self) -> bool {
        matches!(*self.state.borrow(), State::Closed)
    }

    /// The supervisor: wait for the session to fail, replace it, repeat until closed.
    pub(super) async fn supervise(self: Arc<Self>) {
        loop {
            let current = match &*self.state.borrow() {
                State::Up(session) => Arc::clone(session),
                State::Down => {
                    unreachable!("only the supervisor takes a link down, and it brings it back up")
                }
                State::Closed => return,
            };
            self.watch(&current).await;
            if self.is_closed() {
                return;
            }
            tracing::warn!(broker = %self.nodes.shown(current.node), "lost the broker connection, reconnecting");
            self.state
                .send_if_modified(|state| replace_unless_closed(state, State::Down));
            let Some(next) = self.reconnect(&current).await else {
                return;
            };
            tracing::info!(broker = %self.nodes.shown(next.node), generation = next.generation, "reconnected to the broker");
            self.options.telemetry.emit(&Event::BrokerReconnected);
            self.state
                .send_if_modified(|state| replace_unless_closed(state, State::Up(next)));
        }
    }

    /// Return once `session`'s connection is down or the link is closed.
    async fn watch(&self, session: &Session) {
        let mut events = pin!(session.connection().events_listener());
        let mut listening = true;
        loop {
            if !session.is_connected() || self.is_closed() {
                return;
            }
            tokio::select! {
                event = std::future::poll_fn(|cx| Pin::as_mut(&mut events).poll_next(cx)), if listening => {
                    listening = event.is_some();
                }
                () = self.wake.notified() => {}
                () = sleep(HEALTH_CHECK) => {}
            }
        }
    }

    /// Open sessions until one connects and takes the topology; `None` once closed. With
    /// several nodes, the first attempt goes to the node after `lost`'s, and each further
    /// one to the next node in turn.
    async fn reconnect(&self, lost: &Session) -> Option<Arc<Session>> {
        let generation = lost.generation + 1;
        let first = if self.nodes.len() > 1 {
            lost.node + 1
        } else {
            lost.node
        };
        let mut failures = 0;
        loop {
            if self.is_closed() {
                return None;
            }
            let node = (first + failures as usize) % self.nodes.len();
            match self.open(node, generation).await {
                Ok(session) => return Some(Arc::new(session)),
                Err(error) => {
                    let pause = self.options.backoff.delay(failures);
                    tracing::warn!(broker = %self.nodes.shown(node), %error, ?pause, "reconnecting to the broker failed");
                    sleep(pause).await;
                    failures += 1;
                }
            }
        }
    }

    async fn open(&self, node: usize, generation: u64) -> Result<Session, lapin::Error> {
        let session = Session::open(self.nodes.url(node), node, &self.options, generation).await?;
        let topology = self.topology.lock().expect("topology poisoned").clone();
        for config in &topology {
            match session.declare_work_queue(config).await {
                Ok(()) => {}
                Err(Failure::Lost(error)) => return Err(error),
                // The queue was changed behind our back; the session is still good for
                // every other queue, and the refusal resurfaces where the queue is used.
                Err(Failure::Final(error)) => {
                    tracing::error!(queue = %config.name, %error, "re-declaring a queue after a reconnect failed");
                }
            }
        }
        Ok(session)
    }
}

fn replace_unless_closed(state: &mut State, next: State) -> bool {
    if matches!(state, State::Closed) {
        return false;
    }
    *state = next;
    true
}
