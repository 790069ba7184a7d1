//! A harness that runs plugins on the memory backend, for tests under tokio's paused clock.
//!
//! ```ignore
//! let h = Harness::start(units, WorkerConfig::default()).await;
//! h.enqueue("scripted.SendEmail", json!({"key": "flaky@example.com", "fail_times": 2})).await;
//! h.run_until_idle().await;
//! assert_eq!(h.log.attempts_of("flaky@example.com"), vec![1, 2, 3]);
//! ```

mod log;
mod native;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::broker::{Backend, MemoryBackend};
use crate::envelope::Envelope;
use crate::plugin::Engine;
use crate::reload::Loader;
use crate::worker::{Fleet, Plugins, Unit, Worker, WorkerConfig};

pub use log::{Call, InvocationLog};
pub use native::native_unit;

/// Load the plugin at `path` as a unit keyed by its path.
///
/// # Panics
/// If the plugin does not load: a test's fixture must.
pub async fn load_plugin(engine: &Engine, path: &Path) -> Unit {
    let (engine, owned) = (engine.clone(), path.to_owned());
    let plugin = tokio::task::spawn_blocking(move || engine.load(&owned))
        .await
        .expect("the load task does not panic")
        .unwrap_or_else(|err| panic!("test plugin must load: {err}"));
    Unit::from_plugin(path.display().to_string(), plugin)
}

/// A worker on a [`MemoryBackend`] whose handlers are recorded in [`Harness::log`].
#[derive(Debug)]
pub struct Harness {
    /// The broker, for inspecting queues.
    pub backend: MemoryBackend,
    /// Every handler run.
    pub log: InvocationLog,
    /// The registry the worker serves, for loading and removing units mid-test.
    pub plugins: Plugins,
    shutdown: CancellationToken,
    worker: JoinHandle<()>,
}

impl Harness {
    /// Load `units` (recorded) and start a worker on a fresh memory backend.
    pub async fn start(units: impl IntoIterator<Item = Unit>, config: WorkerConfig) -> Self {
        Self::start_on(MemoryBackend::new(), units, config).await
    }

    /// Load `units` (recorded) and start a worker on `backend`: two harnesses on one
    /// backend are two hosts of one fleet.
    pub async fn start_on(
        backend: MemoryBackend,
        units: impl IntoIterator<Item = Unit>,
        mut config: WorkerConfig,
    ) -> Self {
        // The worker follows the operators' orders given through `backend`
        // ([`Control`](crate::broker::Control)), as a host does, and the pauses of the
        // grants file in `config.caps`.
        config.fleet = Fleet::new(backend.clone(), config.telemetry.clone());
        let log = InvocationLog::default();
        let plugins = Plugins::new();
        for unit in units {
            let unit = unit.map_handler(|handler| log.recording(handler));
            plugins
                .install(unit)
                .unwrap_or_else(|err| panic!("harness units must load: {err}"));
        }
        for queue in plugins.current().queues() {
            backend
                .declare(queue)
                .await
                .expect("the memory backend declares any valid queue");
        }
        let shutdown = CancellationToken::new();
        let (fleet, control, stop) = (config.fleet.clone(), backend.clone(), shutdown.clone());
        tokio::spawn(async move { fleet.follow(&control, stop).await });
        // And the pauses of the grants file in force, as a host does.
        config.fleet.pause_in_file(config.caps.current().paused());
        let (fleet, grants, stop) = (config.fleet.clone(), config.caps.clone(), shutdown.clone());
        tokio::spawn(async move { fleet.follow_grants(&grants, stop).await });
        let worker = tokio::spawn(
            Worker::new(backend.clone(), plugins.clone(), config).run(shutdown.clone()),
        );
        Self {
            backend,
            log,
            plugins,
            shutdown,
            worker,
        }
    }

    /// Load another unit while the worker runs, recorded like the others.
    pub fn install(&self, unit: Unit) -> Result<(), crate::worker::RegistryError> {
        self.plugins
            .install(unit.map_handler(|handler| self.log.recording(handler)))
    }

    /// A loader into this harness's registry whose plugins are recorded like the others.
    pub fn loader(&self, engine: Engine) -> Loader {
        let log = self.log.clone();
        Loader::new(engine, self.plugins.clone())
            .wrapping(Arc::new(move |handler| log.recording(handler)))
    }

    /// Enqueue a first attempt of `job_type` with `payload` on the queue its route names.
    pub async fn enqueue(&self, job_type: &str, payload: serde_json::Value) -> Envelope {
        let registry = self.plugins.current();
        let route = registry
            .route(job_type)
            .unwrap_or_else(|| panic!("no loaded unit serves `{job_type}`"));
        let payload =
            RawValue::from_string(payload.to_string()).expect("a JSON value is valid JSON");
        let envelope = Envelope::new(job_type, route.queue.name.clone(), payload);
        // Declared here too, because a unit installed a moment ago may not be consumed yet.
        self.backend
            .declare(&route.queue)
            .await
            .expect("the memory backend declares any valid queue");
        self.backend
            .publish(&envelope, None)
            .await
            .expect("the queue is declared");
        envelope
    }

    /// Publish a raw body onto `queue`, as a foreign producer might.
    pub fn publish_raw(&self, queue: &str, body: &[u8]) {
        self.backend
            .publish_raw(queue, body.to_vec())
            .expect("the queue is declared");
    }

    /// The reasons of `queue`'s dead letters, oldest first.
    pub fn dead_letter_reasons(&self, queue: &str) -> Vec<String> {
        self.backend
            .dead_letters(queue)
            .into_iter()
            .map(|letter| letter.reason)
            .collect()
    }

    /// Wait (on tokio's clock) until no queue has a message ready, held or unsettled.
    ///
    /// # Panics
    /// If that does not happen within an hour of tokio time.
    pub async fn run_until_idle(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
        while !self.is_idle() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the harness did not go idle within an hour"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn is_idle(&self) -> bool {
        self.backend.queues().iter().all(|q| {
            self.backend.ready(q) == 0
                && self.backend.waiting(q) == 0
                && self.backend.unacked(q) == 0
        })
    }

    /// Stop the worker gracefully and wait for it.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.worker.await.expect("the worker task does not panic");
    }
}
