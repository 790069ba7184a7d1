//! The `queuey` 1.x peer: native handlers on queues named per run.
//!
//! `queuey` names queues with `&'static str`, fixed at compile time by its derive; the
//! queue set here is written by hand instead, so that each run gets queues of its own on
//! a shared broker. Job names match jobhost's fixtures, so one envelope serves both.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use queuey::{
    JobContext, JobError, JobHandler, QueueConfig, QueueSet, RabbitMqBackend, RetryPolicy, Worker,
    async_trait,
};
use serde::{Deserialize, Serialize};

use crate::events::Events;

/// The peer's queues; their names are set once per run by [`name_queues`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PeerQueues {
    /// Mirrors the no-op plugin's `test.noop`: 10 priorities, prefetch 16 unless
    /// [`set_noop_prefetch`] said otherwise.
    Noop,
    /// Mirrors the scripted plugin's `test.emails` for a job that fails once: a 1 s wait.
    Flaky,
}

static NAMES: OnceLock<[&'static str; 2]> = OnceLock::new();

/// The prefetch of [`PeerQueues::Noop`]: `queuey` reads it from the queue set, which has no
/// state of its own.
static NOOP_PREFETCH: AtomicU16 = AtomicU16::new(16);

/// Give [`PeerQueues::Noop`] `prefetch` for the workers started from now on.
pub(crate) fn set_noop_prefetch(prefetch: u16) {
    NOOP_PREFETCH.store(prefetch, Ordering::Release);
}

/// Name the peer's queues `{noop}` and `{flaky}` for the rest of the process.
///
/// # Panics
/// When called twice with other names: `queuey` caches nothing, but a queue set whose
/// names change under a running worker would be a lie.
pub(crate) fn name_queues(noop: &str, flaky: &str) {
    let leak = |name: &str| -> &'static str { Box::leak(name.to_owned().into_boxed_str()) };
    let names = *NAMES.get_or_init(|| [leak(noop), leak(flaky)]);
    assert_eq!(
        names,
        [noop, flaky],
        "the peer's queues are named once per run"
    );
}

impl QueueSet for PeerQueues {
    fn all() -> &'static [Self] {
        &[Self::Noop, Self::Flaky]
    }

    fn name(&self) -> &'static str {
        let names = NAMES.get().expect("name_queues runs before the peer");
        match self {
            Self::Noop => names[0],
            Self::Flaky => names[1],
        }
    }

    fn config(&self) -> QueueConfig {
        let config = QueueConfig::new(self.name());
        match self {
            Self::Noop => config.prefetch(NOOP_PREFETCH.load(Ordering::Acquire)),
            Self::Flaky => config
                .prefetch(16)
                .retry(RetryPolicy::fixed(3, Duration::from_secs(1))),
        }
    }
}

/// `noop.Noop`, as the no-op plugin declares it.
#[derive(Debug, Serialize, Deserialize, queuey::Job)]
#[job(name = "noop.Noop", queue = PeerQueues::Noop)]
pub(crate) struct Noop {}

/// `scripted.SendEmail` with the fields the retry scenario sets.
#[derive(Debug, Serialize, Deserialize, queuey::Job)]
#[job(name = "scripted.SendEmail", queue = PeerQueues::Flaky)]
pub(crate) struct Flaky {
    key: String,
    fail_times: u32,
}

/// Counts what the peer's handlers did.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) completed: AtomicU64,
    /// Failures: retries are published right after, so their rate is the retry publishes'.
    failures: Events,
}

impl Tally {
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    fn failure(&self) {
        self.failures.record();
    }

    /// Failures per second between the first and the last.
    pub(crate) fn failure_rate(&self) -> Option<f64> {
        self.failures.rate()
    }
}

struct NoopHandler(Arc<Tally>);

#[async_trait]
impl JobHandler for NoopHandler {
    type Job = Noop;

    async fn handle(&self, _job: Noop, _ctx: JobContext) -> Result<(), JobError> {
        self.0.completed.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

struct FlakyHandler(Arc<Tally>);

#[async_trait]
impl JobHandler for FlakyHandler {
    type Job = Flaky;

    async fn handle(&self, job: Flaky, ctx: JobContext) -> Result<(), JobError> {
        if ctx.attempt <= job.fail_times {
            self.0.failure();
            return Err(JobError::retryable_msg("service is down"));
        }
        self.0.completed.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// A `queuey` backend connected to `url`.
pub(crate) async fn connect(url: &str) -> anyhow::Result<Arc<RabbitMqBackend>> {
    Ok(Arc::new(RabbitMqBackend::connect(url).await?))
}

/// Wait until the handlers completed `jobs` jobs, or `deadline` passes.
pub(crate) async fn wait_for(tally: &Tally, jobs: u64, deadline: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    while tally.completed() < jobs {
        anyhow::ensure!(
            start.elapsed() < deadline,
            "queuey completed only {} of {jobs} jobs within {deadline:?}",
            tally.completed()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// A running `queuey` worker consuming one queue.
pub(crate) struct Running {
    backend: Arc<RabbitMqBackend>,
    handle: queuey::WorkerHandle,
    task: tokio::task::JoinHandle<queuey::Result<()>>,
}

impl Running {
    /// Start a worker on `queue` whose handler counts into `tally`.
    pub(crate) async fn start(
        backend: Arc<RabbitMqBackend>,
        queue: PeerQueues,
        tally: Arc<Tally>,
    ) -> anyhow::Result<Self> {
        let builder = Worker::<PeerQueues, _>::builder(Arc::clone(&backend)).queues(&[queue]);
        let builder = match queue {
            PeerQueues::Noop => builder.handler(NoopHandler(tally)),
            PeerQueues::Flaky => builder.handler(FlakyHandler(tally)),
        };
        let worker = builder.build().await?;
        let handle = worker.handle();
        let task = tokio::spawn(worker.run());
        Ok(Self {
            backend,
            handle,
            task,
        })
    }

    /// Stop the worker gracefully and close its connection.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.handle.shutdown();
        self.task.await??;
        queuey::Backend::close(&*self.backend).await?;
        Ok(())
    }
}
