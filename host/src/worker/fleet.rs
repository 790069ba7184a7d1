//! What the fleet's operators decided, as this host knows it: which of its queues are
//! paused and which jobs are cancelled; and [`Fleet::follow`], which keeps that up to date
//! from the broker's [`Control`].
//!
//! # Contract
//! - **Pause.** Whether a queue is paused is whatever [`Control::is_paused`] said last
//!   ([`Fleet::learn`]): a queue's consume loop asks before it consumes, and the follower
//!   asks again at each pause or resume order for the queue and after each (re)join, so a
//!   lost order is made good by the next look. While a queue is paused its loop does not
//!   consume; a delivery it already pulled but did not start goes back to the broker
//!   unrun, its attempt unspent; jobs already running finish.
//! - **Pause in the grants file.** A queue the grants file in force pauses
//!   ([`Grants::paused`](crate::grants::Grants::paused)) is paused here whatever the
//!   broker says ([`Fleet::follow_grants`] applies each reload at once); a `resume` order
//!   does not undo it, editing the file does.
//! - **Cancel.** A cancelled job id is remembered (the newest [`CANCELLED_MAX`]; beyond,
//!   the oldest is forgotten). [`Fleet::start`] refuses to start a remembered one, and a
//!   cancellation of a job running here ends its [`Running::cancelled`] wait at once, so
//!   the worker drops the attempt (and with it the wasm instance).
//! - A fleet that follows nothing ([`Fleet::default`]) never pauses or cancels: the
//!   worker's behaviour without operators.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::handler::BoxFuture;
use crate::broker::{BrokerError, Command, Control, Followed, Follower};
use crate::grants::SharedGrants;
use crate::job::Cancellation;
use crate::telemetry::{Event, Telemetry};
use crate::text::{NAME_MAX, bounded};

/// The most cancelled job ids a host remembers: some 10 MiB at most. A cancellation older
/// than the newest this many is forgotten, and the job would run if delivered after that.
pub const CANCELLED_MAX: usize = 65_536;

/// How long following waits before trying again after the broker refused.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

type IsPaused = Arc<dyn Fn(String) -> BoxFuture<'static, Result<bool, BrokerError>> + Send + Sync>;

/// The fleet's decisions this host knows of; clones share them.
#[derive(Clone, Default)]
pub struct Fleet {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Asks the broker whether a queue is paused; `None` follows nothing.
    is_paused: Option<IsPaused>,
    telemetry: Telemetry,
    /// Each consumed queue's pause, as learnt last.
    queues: Mutex<HashMap<String, QueuePause>>,
    /// The queues the grants file in force pauses.
    paused_in_file: Mutex<BTreeSet<String>>,
    /// One look at the broker at a time, so an older answer never overwrites a newer one.
    learning: tokio::sync::Mutex<()>,
    jobs: Mutex<Jobs>,
    /// Counts cancellations, waking every running job to look whether it is the one.
    /// Because cancellations are rare and jobs many, a job costs no registration of its
    /// own: only a look at the cancelled ids when it starts and at each cancellation.
    cancellations: watch::Sender<u64>,
}

/// One queue's pause: what the broker said last, what the grants file says, and the two
/// together, which its consume loop watches.
struct QueuePause {
    by_broker: bool,
    in_file: bool,
    paused: watch::Sender<bool>,
}

impl QueuePause {
    /// Set what the broker or the file says, and send the two together.
    fn update(&mut self, by_broker: Option<bool>, in_file: Option<bool>) -> Updated {
        let was_by_broker = self.by_broker;
        self.by_broker = by_broker.unwrap_or(self.by_broker);
        self.in_file = in_file.unwrap_or(self.in_file);
        let paused = self.by_broker || self.in_file;
        let changed = self
            .paused
            .send_if_modified(|known| std::mem::replace(known, paused) != paused);
        Updated {
            changed,
            broker_changed: was_by_broker != self.by_broker,
            paused,
        }
    }
}

/// What an update of a queue's pause did.
#[derive(Debug, Clone, Copy)]
struct Updated {
    /// The pause the consume loop sees changed.
    changed: bool,
    /// What the broker says changed.
    broker_changed: bool,
    /// Whether the queue is paused now.
    paused: bool,
}

#[derive(Default)]
struct Jobs {
    cancelled: HashMap<Uuid, Cancellation>,
    /// The remembered ids, oldest first, for forgetting.
    order: VecDeque<Uuid>,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("following", &self.inner.is_paused.is_some())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// A fleet whose pauses are asked of `control`, each answer emitted into `telemetry`
    /// ([`Event::PauseLearnt`]); run [`Fleet::follow`] to learn of orders.
    pub fn new<C: Control + Clone>(control: C, telemetry: Telemetry) -> Self {
        let is_paused: IsPaused = Arc::new(move |queue| {
            let control = control.clone();
            Box::pin(async move { control.is_paused(&queue).await })
        });
        Self {
            inner: Arc::new(Inner {
                is_paused: Some(is_paused),
                telemetry,
                ..Inner::default()
            }),
        }
    }

    /// Follow `control`'s orders until `stop`, folding them into this fleet.
    pub async fn follow<C: Control>(&self, control: &C, stop: CancellationToken) {
        let mut follower = loop {
            match control.follow().await {
                Ok(follower) => break follower,
                Err(error) => {
                    warn!(%error, retry_in = ?FOLLOW_RETRY, "cannot follow the fleet's orders")
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(FOLLOW_RETRY) => {}
            }
        };
        loop {
            let followed = tokio::select! {
                () = stop.cancelled() => return,
                followed = follower.next() => followed,
            };
            match followed {
                None => return,
                Some(Followed::Joined) => {
                    info!("following the operators' orders to the fleet");
                    for queue in self.queues() {
                        self.learn_or_warn(&queue).await;
                    }
                }
                Some(Followed::Order(order)) => match order.command {
                    Command::Pause { queue } | Command::Resume { queue } => {
                        if self.watches(&queue) {
                            self.learn_or_warn(&queue).await;
                        }
                    }
                    Command::Cancel { job_id } => self.cancel(
                        job_id,
                        Cancellation {
                            by: order.by,
                            at_ms: order.at_ms,
                        },
                    ),
                },
            }
        }
    }

    /// Ask the broker whether `queue` is paused, and remember the answer.
    pub async fn learn(&self, queue: &str) -> Result<bool, BrokerError> {
        let Some(is_paused) = &self.inner.is_paused else {
            return Ok(self.update(queue, None, None).paused);
        };
        let _one_at_a_time = self.inner.learning.lock().await;
        let by_broker = is_paused(queue.to_owned()).await?;
        let updated = self.update(queue, Some(by_broker), None);
        if updated.broker_changed {
            let queue = bounded(queue, NAME_MAX);
            match (by_broker, updated.paused) {
                (true, _) => info!(%queue, "queue paused by an operator: not consuming it"),
                (false, false) => info!(%queue, "queue resumed by an operator"),
                (false, true) => {
                    info!(%queue, "queue resumed by an operator, but the grants file pauses it: not consuming it")
                }
            }
        }
        Ok(updated.paused)
    }

    /// Pause here, at once, the queues `paused` names (the grants file's), and no others
    /// for the file's sake.
    pub fn pause_in_file(&self, paused: &BTreeSet<String>) {
        *self
            .inner
            .paused_in_file
            .lock()
            .expect("file pauses poisoned") = paused.clone();
        for queue in self.queues() {
            let in_file = paused.contains(&queue);
            let updated = self.update(&queue, None, Some(in_file));
            if updated.changed {
                let queue = bounded(&queue, NAME_MAX);
                if updated.paused {
                    info!(%queue, "queue paused by the grants file: not consuming it");
                } else {
                    info!(%queue, "queue no longer paused by the grants file");
                }
            }
        }
    }

    /// Apply the pauses of `grants` now and at each reload, until `stop`.
    pub async fn follow_grants(&self, grants: &SharedGrants, stop: CancellationToken) {
        let mut changes = grants.changes();
        loop {
            self.pause_in_file(grants.current().paused());
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Set what the broker or the file says of `queue` (`None`: as it was).
    fn update(&self, queue: &str, by_broker: Option<bool>, in_file: Option<bool>) -> Updated {
        let mut queues = self.lock_queues();
        let updated = self.entry(&mut queues, queue).update(by_broker, in_file);
        drop(queues);
        self.inner.telemetry.emit(&Event::PauseLearnt {
            queue,
            paused: updated.paused,
        });
        updated
    }

    async fn learn_or_warn(&self, queue: &str) {
        if let Err(error) = self.learn(queue).await {
            warn!(queue = %bounded(queue, NAME_MAX), %error, "cannot tell whether the queue is paused; keeping what was known");
        }
    }

    /// Whether `queue` is paused, as learnt last.
    pub fn is_paused(&self, queue: &str) -> bool {
        self.lock_queues()
            .get(queue)
            .is_some_and(|known| *known.paused.borrow())
    }

    /// `queue`'s pause as learnt, changing as it is learnt again.
    pub(super) fn watch(&self, queue: &str) -> Pause {
        let mut queues = self.lock_queues();
        Pause(self.entry(&mut queues, queue).paused.subscribe())
    }

    /// `queue`'s pause, made on first sight with what the grants file says of it.
    fn entry<'a>(
        &self,
        queues: &'a mut HashMap<String, QueuePause>,
        queue: &str,
    ) -> &'a mut QueuePause {
        queues.entry(queue.to_owned()).or_insert_with(|| {
            let in_file = self
                .inner
                .paused_in_file
                .lock()
                .expect("file pauses poisoned")
                .contains(queue);
            if in_file {
                let queue = bounded(queue, NAME_MAX);
                info!(%queue, "queue paused by the grants file: not consuming it");
            }
            QueuePause {
                by_broker: false,
                in_file,
                paused: watch::Sender::new(in_file),
            }
        })
    }

    fn watches(&self, queue: &str) -> bool {
        self.lock_queues().contains_key(queue)
    }

    fn queues(&self) -> Vec<String> {
        self.lock_queues().keys().cloned().collect()
    }

    fn lock_queues(&self) -> MutexGuard<'_, HashMap<String, QueuePause>> {
        self.inner.queues.lock().expect("queue pauses poisoned")
    }

    fn lock_jobs(&self) -> MutexGuard<'_, Jobs> {
        self.inner.jobs.lock().expect("cancelled jobs poisoned")
    }

    /// Remember that `job_id` is cancelled, and interrupt it if it runs here.
    pub fn cancel(&self, job_id: Uuid, cancellation: Cancellation) {
        let mut jobs = self.lock_jobs();
        if jobs.cancelled.insert(job_id, cancellation).is_none() {
            jobs.order.push_back(job_id);
            if jobs.order.len() > CANCELLED_MAX
                && let Some(oldest) = jobs.order.pop_front()
            {
                jobs.cancelled.remove(&oldest);
            }
        }
        drop(jobs);
        self.inner
            .cancellations
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// `job_id` starts running here, unless it is cancelled.
    pub(super) fn start(&self, job_id: Uuid) -> Result<Running, Cancellation> {
        // Subscribed under the lock, so a cancellation after the look below wakes the job.
        let jobs = self.lock_jobs();
        if let Some(cancellation) = jobs.cancelled.get(&job_id) {
            return Err(cancellation.clone());
        }
        Ok(Running {
            fleet: self.clone(),
            job_id,
            cancellations: self.inner.cancellations.subscribe(),
        })
    }

    fn cancellation_of(&self, job_id: Uuid) -> Option<Cancellation> {
        self.lock_jobs().cancelled.get(&job_id).cloned()
    }
}

/// One queue's pause as its consume loop sees it.
pub(super) struct Pause(watch::Receiver<bool>);

impl Pause {
    /// Wait until the queue is paused (`true`) or not (`false`).
    pub(super) async fn until(&mut self, paused: bool) {
        // The fleet keeps every sender, so the wait ends only when the state is reached;
        // the borrow it returns ends here, because it must not live across an await.
        if self.0.wait_for(|now| *now == paused).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A job running here.
pub(super) struct Running {
    fleet: Fleet,
    job_id: Uuid,
    cancellations: watch::Receiver<u64>,
}

impl Running {
    /// Wait until the job is cancelled; who cancelled it and when.
    pub(super) async fn cancelled(&mut self) -> Cancellation {
        loop {
            if let Some(cancellation) = self.fleet.cancellation_of(self.job_id) {
                return cancellation;
            }
            if self.cancellations.changed().await.is_err() {
                // The fleet keeps the sender as long as it lives; it never ends.
                std::future::pending::<()>().await;
            }
        }
    }
}
