//! The worker: consume every queue the loaded plugins declare, run each delivery, settle it.
//!
//! # Contract
//! - At most `concurrency` jobs run at once, across all queues. Each queue's loop pulls one
//!   delivery and then waits for a slot, so an idle queue never holds a shared slot another
//!   queue could use, and at most one delivery per queue waits in the worker. Each queue
//!   keeps one slot of its own, so a busy queue cannot hold another's jobs back ([`slots`]).
//! - Each delivery is settled exactly once, as `deliver`'s module doc lays out; nothing
//!   is acked before what replaces it (retry, deferral, dead letter, follow-ups) is
//!   confirmed by the broker.
//! - The set of consumed queues follows the [`Plugins`] registry: a newly loaded plugin's
//!   queues are declared and consumed, a removed plugin's consumers stop (their messages
//!   stay in the broker), and each delivery reads the registry current when it starts.
//! - On a backend that allows it ([`Backend::inline_limit`]), a delivery whose queue's jobs
//!   have lately been short starts in its queue's consume loop and gets a task of its own
//!   only if it waits; others start in a task ([`inline`]'s contract).
//! - A queue the fleet's operators paused is not consumed: its loop asks the broker before
//!   it consumes and stops consuming when a pause is learnt, giving back a delivery it
//!   pulled but did not start; a cancelled job is settled as cancelled instead of run, or
//!   interrupted where it runs ([`fleet`]'s contract).
//! - Shutdown stops pulling, lets the jobs already pulled finish and settle within the grace
//!   period, and then gives up on the rest, which the broker redelivers.
//! - An attempt is recorded for replay when the host has a recorder and the grants file
//!   does not turn its queue's recording off (`deliver`); a new plugin version on probation
//!   shares the deliveries with the old one until a verdict ([`on_probation`]).

mod caps;
mod deliver;
mod fleet;
mod handler;
mod inline;
mod observe;
mod probation;
mod rates;
mod registry;
mod settle;
mod slots;
mod tally;
mod unsettled;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use jobhost_sdk::QueueConfig;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::broker::{Backend, BrokerError, Consumer, Delivery};
use crate::grants::SharedGrants;
use crate::job::Recorder;
use crate::policy::{Granularity, effective_timeout};
use crate::telemetry::Telemetry;
use inline::{BusyTime, Timed};
use slots::{QueueSlots, Slots};

pub use fleet::{CANCELLED_MAX, Fleet};
pub use handler::{BoxFuture, Handler};
pub use probation::{Verdicts, on_probation};
pub use registry::{Plugins, Registry, RegistryError, Route, Unit};

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs running at once across all queues (default 64).
    pub concurrency: usize,
    /// The step retry and deferral delays are rounded up to (default 1 s).
    pub retry_granularity: Granularity,
    /// An attempt's timeout when neither its job nor its queue sets one (default 5 min,
    /// below RabbitMQ's 30-minute consumer timeout).
    pub default_timeout: Duration,
    /// How long shutdown waits for running jobs (default 30 s).
    pub grace_period: Duration,
    /// The largest payload handed to a plugin (default 8 MiB); a larger one is
    /// dead-lettered, because copying it into every attempt's sandbox would only fail there.
    pub max_payload_bytes: usize,
    /// How often a message may fail to settle (its publish or ack did not happen) before
    /// its next delivery dead-letters it as poison without running it (default 5).
    pub max_redeliveries: u32,
    /// The broker's consumer timeout (RabbitMQ's `consumer_timeout`, default 30 min): a
    /// delivery unacked for longer makes the broker close the channel and redeliver it
    /// while it still runs. No attempt may run longer than
    /// [`attempt_timeout`](Self::attempt_timeout) allows under it.
    pub broker_consumer_timeout: Duration,
    /// Where the worker emits what its deliveries do: starts and ends, handler durations,
    /// failed publishes, settlements (default: [`Telemetry::none`], nobody watches); the
    /// host's has its metrics and the dashboard's activity attached.
    pub telemetry: Telemetry,
    /// What the fleet's operators paused and cancelled (default: a fleet that follows no
    /// orders, so nothing is ever paused or cancelled); the host makes one that follows
    /// its backend's orders and shares it with the admin API.
    pub fleet: Fleet,
    /// The grants file in force, whose `[queues]` and `[jobs]` concurrency caps and rate
    /// limits hold fleet-wide (default: no grants, so none). The host shares the engine's,
    /// so a reload of the file changes them for the jobs that start after it.
    pub caps: SharedGrants,
    /// Where attempts that do not complete are recorded, for `jobhost replay` (default:
    /// nowhere); the grants file turns a queue's recording off (docs/replay.md).
    pub recorder: Option<Arc<dyn Recorder>>,
}

impl WorkerConfig {
    /// `timeout` cut to fit under the broker's consumer timeout, with a tenth of it left
    /// for settling, so the broker never redelivers a job that is still running.
    pub fn attempt_timeout(&self, timeout: Duration) -> Duration {
        timeout.min(self.longest_attempt())
    }

    /// The longest an attempt may run: nine tenths of the broker's consumer timeout.
    pub fn longest_attempt(&self) -> Duration {
        self.broker_consumer_timeout.mul_f64(0.9)
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 64,
            retry_granularity: Granularity::default(),
            default_timeout: Duration::from_secs(300),
            grace_period: Duration::from_secs(30),
            max_payload_bytes: 8 * 1024 * 1024,
            max_redeliveries: 5,
            broker_consumer_timeout: Duration::from_secs(30 * 60),
            telemetry: Telemetry::none(),
            fleet: Fleet::default(),
            caps: SharedGrants::default(),
            recorder: None,
        }
    }
}

/// What every delivery task shares.
#[derive(Debug)]
struct Shared<B> {
    backend: B,
    plugins: Plugins,
    config: WorkerConfig,
    unsettled: unsettled::Unsettled,
    tally: tally::Tally,
}

/// Consumes the queues of the loaded plugins until shut down.
#[derive(Debug)]
pub struct Worker<B> {
    shared: Arc<Shared<B>>,
}

struct Subscription {
    config: QueueConfig,
    stop: CancellationToken,
}

impl<B: Backend> Worker<B> {
    /// A worker for `backend` serving whatever `plugins` holds.
    pub fn new(backend: B, plugins: Plugins, config: WorkerConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                backend,
                plugins,
                config,
                unsettled: unsettled::Unsettled::default(),
                tally: tally::Tally::default(),
            }),
        }
    }

    /// Run until `shutdown` is cancelled, then drain within the grace period.
    pub async fn run(self, shutdown: CancellationToken) {
        // The runtime's threads bound how many jobs compute at once, whatever the
        // concurrency, so an operator sees both side by side.
        info!(
            concurrency = self.shared.config.concurrency,
            threads = tokio::runtime::Handle::current().metrics().num_workers(),
            "worker started"
        );
        let mut consumers = Consumers {
            shared: self.shared.clone(),
            slots: Slots::new(self.shared.config.concurrency),
            jobs: TaskTracker::new(),
            loops: TaskTracker::new(),
            abandon: CancellationToken::new(),
            subscriptions: HashMap::new(),
        };
        let summary_stop = CancellationToken::new();
        let summary = {
            let (shared, stop) = (self.shared.clone(), summary_stop.clone());
            tokio::spawn(async move { shared.tally.report(stop).await })
        };
        let mut changes = self.shared.plugins.subscribe();
        loop {
            let registry = changes.borrow_and_update().clone();
            self.warn_of_timeouts_the_broker_would_cut(&registry);
            consumers.follow(&registry, &shutdown);
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { shutdown.cancelled().await; break },
                () = shutdown.cancelled() => break,
            }
        }
        consumers.drain().await;
        summary_stop.cancel();
        if let Err(err) = summary.await {
            warn!(error = %err, "the job summary task failed");
        }
        info!("worker stopped");
    }
}

/// The consume loops of the queues the registry declares, and the jobs they started.
struct Consumers<B> {
    shared: Arc<Shared<B>>,
    /// One per job running, across all queues.
    slots: Slots,
    jobs: TaskTracker,
    loops: TaskTracker,
    /// Cancelled when the grace period is over: running jobs give up.
    abandon: CancellationToken,
    subscriptions: HashMap<String, Subscription>,
}

impl<B: Backend> Consumers<B> {
    /// Consume exactly the queues `registry` declares: stop the loops of queues it no
    /// longer declares (or declares differently), start loops for new ones.
    fn follow(&mut self, registry: &Registry, shutdown: &CancellationToken) {
        let wanted: HashMap<&str, &QueueConfig> =
            registry.queues().map(|q| (q.name.as_str(), q)).collect();
        self.subscriptions.retain(|name, subscription| {
            let keep = wanted
                .get(name.as_str())
                .is_some_and(|q| **q == subscription.config);
            if !keep {
                info!(queue = %name, "stopping consumer");
                subscription.stop.cancel();
            }
            keep
        });
        for (name, config) in wanted {
            if self.subscriptions.contains_key(name) {
                continue;
            }
            let stop = shutdown.child_token();
            let consume = ConsumeLoop {
                shared: self.shared.clone(),
                queue: config.clone(),
                slots: self.slots.for_queue(),
                jobs: self.jobs.clone(),
                stop: stop.clone(),
                abandon: self.abandon.clone(),
            };
            self.loops.spawn(consume.run());
            let subscription = Subscription {
                config: config.clone(),
                stop,
            };
            self.subscriptions.insert(name.to_owned(), subscription);
        }
    }

    /// Wait for the loops to stop pulling, then for the jobs they started, up to the grace
    /// period; past it, running jobs give up and the broker redelivers them.
    async fn drain(self) {
        self.loops.close();
        self.loops.wait().await;
        self.jobs.close();
        let grace = self.shared.config.grace_period;
        if tokio::time::timeout(grace, self.jobs.wait()).await.is_err() {
            warn!(
                running = self.jobs.len(),
                ?grace,
                "jobs still running after the grace period; the broker will redeliver them"
            );
            self.abandon.cancel();
            self.jobs.wait().await;
        }
    }
}

impl<B> Worker<B> {
    /// Say which job types declare a timeout longer than the broker lets a delivery stay
    /// unacked, and that their attempts are cut to [`WorkerConfig::longest_attempt`].
    fn warn_of_timeouts_the_broker_would_cut(&self, registry: &Registry) {
        let config = &self.shared.config;
        let longest = config.longest_attempt();
        for route in registry.routes() {
            let declared = effective_timeout(&route.job, &route.queue, config.default_timeout);
            if declared > longest {
                warn!(
                    job_type = %route.job.name,
                    timeout = ?declared,
                    cut_to = ?longest,
                    broker_consumer_timeout = ?config.broker_consumer_timeout,
                    "a job timeout is longer than the broker's consumer timeout allows; \
                     its attempts are cut short so the broker never redelivers a running job"
                );
            }
        }
    }
}

/// The loop that pulls from one queue.
struct ConsumeLoop<B> {
    shared: Arc<Shared<B>>,
    queue: QueueConfig,
    slots: QueueSlots,
    jobs: TaskTracker,
    stop: CancellationToken,
    abandon: CancellationToken,
}

impl<B: Backend> ConsumeLoop<B> {
    async fn run(self) {
        self.serve().await;
        self.slots.release();
    }

    async fn serve(&self) {
        let queue: Arc<str> = self.queue.name.as_str().into();
        let busy = BusyTime::new(self.shared.backend.inline_limit());
        let mut paused = self.shared.config.fleet.watch(&queue);
        // The broker's pause mark decides each time before consuming, not what this host
        // heard last, so a host that starts or a loop that restarts honours a pause made
        // while it was away.
        while let Some(is_paused) = self.learn_pause().await {
            if is_paused {
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = paused.until(false) => continue,
                }
            }
            let Some(mut consumer) = self.subscribe().await else {
                return;
            };
            info!(queue = %self.queue.name, prefetch = self.queue.prefetch, "consuming");
            let stopped = self
                .consume(&mut consumer, &queue, &busy, &mut paused)
                .await;
            // Closing hands back what the consumer prefetched and did not deliver; the
            // messages keep their place in the queue.
            consumer.close().await;
            if stopped {
                return;
            }
            info!(queue = %self.queue.name, "stopped consuming the paused queue; its running jobs finish");
        }
    }

    /// Pull and start deliveries until stopped (true) or paused (false).
    async fn consume(
        &self,
        consumer: &mut B::Consumer,
        queue: &Arc<str>,
        busy: &BusyTime,
        paused: &mut fleet::Pause,
    ) -> bool {
        loop {
            let delivery = tokio::select! {
                biased;
                () = self.stop.cancelled() => return true,
                () = paused.until(true) => return false,
                delivery = consumer.next() => delivery,
            };
            let Some(delivery) = delivery else {
                return true;
            };
            // The slot is taken after the pull, because a loop holding a slot while its queue
            // is empty would starve the other queues; the broker's prefetch bounds how many
            // deliveries wait here for a slot, one per queue at most.
            let permit = tokio::select! {
                biased;
                () = self.stop.cancelled() => {
                    self.give_back(delivery, "on shutdown").await;
                    return true;
                }
                // Not started, so not run and no attempt spent: the pause keeps it queued.
                () = paused.until(true) => {
                    self.give_back(delivery, "of a paused queue").await;
                    return false;
                }
                permit = self.slots.acquire() => permit,
            };
            self.start(delivery, queue, busy, permit).await;
        }
    }

    async fn give_back(&self, delivery: <B::Consumer as Consumer>::Delivery, why: &str) {
        if let Err(err) = delivery.requeue().await {
            warn!(queue = %self.queue.name, error = %err, "requeue {why} failed; the broker will redeliver");
        }
    }

    /// Run `delivery` here up to its first wait if its queue's jobs are short, and in a
    /// task of its own from there (or from the start), holding `permit` until it is done.
    async fn start(
        &self,
        delivery: <B::Consumer as Consumer>::Delivery,
        queue: &Arc<str>,
        busy: &BusyTime,
        permit: OwnedSemaphorePermit,
    ) {
        // Boxed here, once: the delivery's future holds its settlement's publishes, and
        // spawning a task moves its future a few times (into the tracker's wrapper, into
        // the task's cell, into `select!` at the first poll); unboxed, those were copies
        // of the whole future per job (`memmove` was 10-13% of `jobhost run`'s CPU, see
        // BENCHMARKS.md, "Smaller findings"); boxed, only a pointer moves.
        // Panics are caught here, so that one of the host's own code in an inline poll
        // ends only its delivery (which the broker redelivers), as it would in a task, and
        // not this queue's loop.
        let mut delivering = AssertUnwindSafe(Timed::new(
            Box::pin(deliver::deliver(
                self.shared.clone(),
                Arc::clone(queue),
                delivery,
            )),
            busy.clone(),
        ))
        .catch_unwind();
        if busy.is_short() && futures_util::poll!(&mut delivering).is_ready() {
            return;
        }
        let abandon = self.abandon.clone();
        self.jobs.spawn(async move {
            // Abandoning drops the delivery unsettled, so the broker redelivers it.
            tokio::select! {
                _ = delivering => {},
                () = abandon.cancelled() => {},
            }
            drop(permit);
        });
    }

    /// Whether the queue is paused, asked of the broker, retrying while it cannot say;
    /// `None` once stopped.
    async fn learn_pause(&self) -> Option<bool> {
        let fleet = &self.shared.config.fleet;
        self.retrying("cannot tell whether the queue is paused", || {
            fleet.learn(&self.queue.name)
        })
        .await
    }

    /// Declare the queue and start consuming, retrying while the broker refuses.
    async fn subscribe(&self) -> Option<B::Consumer> {
        self.retrying("cannot consume", || async {
            self.shared.backend.declare(&self.queue).await?;
            self.shared.backend.consume(&self.queue).await
        })
        .await
    }

    /// `attempt` until it succeeds, waiting 100 ms doubling to 5 s after each failure,
    /// which is logged as `what`; `None` once stopped.
    async fn retrying<T, F, Fut>(&self, what: &str, attempt: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, BrokerError>>,
    {
        let mut wait = Duration::from_millis(100);
        loop {
            match attempt().await {
                Ok(value) => return Some(value),
                Err(err) => {
                    warn!(queue = %self.queue.name, error = %err, retry_in = ?wait, "{what}")
                }
            }
            tokio::select! {
                () = self.stop.cancelled() => return None,
                () = tokio::time::sleep(wait) => wait = (wait * 2).min(Duration::from_secs(5)),
            }
        }
    }
}

#[cfg(test)]
mod caps_tests;
#[cfg(test)]
mod ending_tests;
#[cfg(test)]
mod expiry_tests;
#[cfg(test)]
mod fleet_tests;
#[cfg(test)]
mod probation_tests;
#[cfg(test)]
mod rates_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod trace_tests;
#[cfg(test)]
mod unique_tests;
