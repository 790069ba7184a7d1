//! A worker with a fixture plugin on the test broker, for the worker-level broker tests.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::envelope::Envelope;
use jobhost::grants::{FILE_NAME, Grants};
use jobhost::job::{JobSpec, Manifest};
use jobhost::plugin::{Engine, EngineConfig};
use jobhost::testing::{InvocationLog, load_plugin};
use jobhost::worker::{Plugins, Worker, WorkerConfig};
use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Cleanup, PATIENCE, within};

/// A worker running one fixture plugin on a backend, recording every call.
pub(crate) struct Running {
    pub(crate) log: InvocationLog,
    shutdown: CancellationToken,
    worker: JoinHandle<()>,
}

impl Running {
    pub(crate) async fn start(backend: Arc<RabbitMqBackend>, fixture: &str) -> Self {
        Self::start_granted(backend, fixture, Grants::none(FILE_NAME)).await
    }

    /// [`Running::start`], the plugin granted what `grants` says.
    pub(crate) async fn start_granted(
        backend: Arc<RabbitMqBackend>,
        fixture: &str,
        grants: Grants,
    ) -> Self {
        let cache_dir =
            Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"));
        let engine = Engine::new(EngineConfig {
            cache_dir,
            ..EngineConfig::default()
        })
        .expect("engine");
        engine.grants().replace(grants);
        let log = InvocationLog::default();
        let unit = load_plugin(&engine, &jobhost_fixtures::wasm(fixture)).await;
        let unit = unit.map_handler(|handler| log.recording(handler));
        let plugins = Plugins::new();
        plugins.install(unit).expect("one plugin loads");
        for queue in plugins.current().queues() {
            backend.declare(queue).await.expect("declare");
        }
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn(
            Worker::new(backend, plugins, WorkerConfig::default()).run(shutdown.clone()),
        );
        Self {
            log,
            shutdown,
            worker,
        }
    }

    pub(crate) async fn stop(self) -> InvocationLog {
        self.shutdown.cancel();
        within(PATIENCE, "the worker to stop", self.worker)
            .await
            .expect("the worker does not panic");
        self.log
    }
}

/// The manifest of a plugin named `plugin` serving `job_type` on `queue`, with no retry
/// policy or timeout of the job's own, for native handlers.
pub(crate) fn one_job(plugin: &str, queue: &QueueConfig, job_type: &str) -> Manifest {
    Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: plugin.into(),
        queues: vec![queue.clone()],
        jobs: vec![JobSpec {
            name: job_type.into(),
            queue: queue.name.clone(),
            retry: None,
            timeout: None,
        }],
    }
}

/// Whose turn it is on each fixture queue name, across the tests of this binary.
static TURNS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Mutex::default);

/// The queues a fixture declares, the test's alone while it holds them.
#[derive(Debug)]
pub(crate) struct FixtureQueues {
    /// Dropped first: the queues are deleted before the next test's turn.
    _cleanup: Cleanup,
    _turns: Vec<OwnedMutexGuard<()>>,
}

/// Wait for the turn of this test on `queues`, the fixed names of the queues a fixture
/// plugin declares on the shared broker, then delete them, and again when the guard drops.
///
/// Fixture plugins consume fixed queue names (the `scripted` plugin four of its own), and
/// the tests of one binary run in parallel: two workers on one fixture would take each
/// other's jobs, and one test's cleanup would delete the queues under the other. So a test
/// holds the names it uses, all in one call (turns are taken in name order, so two tests
/// never wait on each other), and tests on other names run beside it. A test that needs no
/// fixed names to itself runs in a `Vhost` instead.
pub(crate) async fn fixture_queues(queues: &[&str]) -> FixtureQueues {
    let mut names = queues.to_vec();
    names.sort_unstable();
    names.dedup();
    let mut turns = Vec::with_capacity(names.len());
    for name in names {
        let turn = TURNS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone();
        turns.push(turn.lock_owned().await);
    }
    drop(Cleanup::new(queues));
    FixtureQueues {
        _cleanup: Cleanup::new(queues),
        _turns: turns,
    }
}

pub(crate) async fn publish(
    backend: &RabbitMqBackend,
    job_type: &str,
    queue: &str,
    payload: serde_json::Value,
) -> Envelope {
    let payload = RawValue::from_string(payload.to_string()).expect("json");
    let envelope = Envelope::new(job_type, queue, payload);
    backend.publish(&envelope, None).await.expect("publish");
    envelope
}

/// Poll `condition` every 50 ms until it holds, failing with `what` after `limit`.
/// Run a worker serving `plugins` on `backend` until `condition` holds, waiting at most
/// `limit` for `what`, then stop it and wait for it to stop.
pub(crate) async fn serve_until<F, Fut>(
    backend: Arc<RabbitMqBackend>,
    plugins: Plugins,
    limit: Duration,
    what: &str,
    condition: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let shutdown = CancellationToken::new();
    let worker =
        tokio::spawn(Worker::new(backend, plugins, WorkerConfig::default()).run(shutdown.clone()));
    eventually(limit, what, condition).await;
    shutdown.cancel();
    within(PATIENCE, "the worker to stop", worker)
        .await
        .expect("the worker does not panic");
}

pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(limit, what, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
