//! A running host: the plugin directory loaded and watched, the worker, and the admin API,
//! on one backend, until shut down.
//!
//! # Contract
//! - The admin listener is bound by the caller before anything loads, so a port in use
//!   fails at once instead of after the plugins compiled.
//! - Compiled plugins are cached where [`EngineConfig::cache_dir`] says (the CLI's default
//!   is the user's cache directory, never the plugin directory, where whoever can drop a
//!   plugin could also drop native code), so a restart does not recompile unchanged plugins.
//! - No credential is logged: neither the admin token nor a dashboard login link. The
//!   caller logs where the token file is; `jobhost dashboard` reads it and prints a link
//!   (see [`AdminAccess`]).
//! - Everything the host's components do is emitted into one telemetry,
//!   [`WorkerConfig::telemetry`] (see [`crate::telemetry`]): the worker's, the loader's, the
//!   fleet's, the scheduler's and the admin API's events (and the RabbitMQ backend's, when
//!   the caller gives it the same). The caller attaches [`HostConfig::metrics`] and
//!   [`HostConfig::activity`] to it ([`telemetry()`] does), which the admin API
//!   serves on `GET /metrics` (with the engine's pool use, read at each scrape) and shows
//!   on the dashboard.
//! - The grants file ([`HostConfig::grants_file`]) is read before the plugins load (a
//!   refused file stops the start) and then watched with the plugins; the admin API shows
//!   the grants in force. Its secrets may not name [`HostConfig::host_secrets`]. The
//!   worker applies the concurrency caps and rate limits of the grants in force
//!   ([`WorkerConfig::caps`]).
//! - Every file is read off the async runtime and as untrusted ([`crate::files`]): a FIFO
//!   or a file over its cap is refused at once, and shutdown never waits for a read.
//! - The worker and the admin API share one [`Fleet`] that follows the backend's operator
//!   orders (pause, resume, cancel) for as long as the host runs.
//! - A [`Scheduler`] fires the grants file's schedules, leading the fleet's schedulers or
//!   standing by (see [`crate::schedule`]).
//! - A batch [`Keeper`] folds the fleet's batch log into the [`Board`] the admin API
//!   reads and fires the callbacks that fall due (see [`crate::batches`]).
//! - Shutdown stops the watch and the admin API and lets the worker drain (its grace
//!   period); `run` returns once all of them are done.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::activity::Activity;
use crate::admin::{self, AdminAccess, AdminBackend, AdminState};
use crate::batches::{Board, Keeper};
use crate::broker;
use crate::files::{self, Rules};
use crate::grants::{Grants, GrantsError, HostSecrets};
use crate::metrics::Metrics;
use crate::plugin::{Engine, EngineConfig, EngineError};
use crate::producer::EnqueueOptions;
use crate::reload::{self, Loader};
use crate::schedule::{Endings, Scheduler};
use crate::telemetry::Telemetry;
use crate::worker::{Fleet, Plugins, Worker, WorkerConfig};

/// The file of the plugin directory that `--demo` enqueues.
pub const DEMO_JOBS: &str = "demo-jobs.jsonl";

/// What [`DEMO_JOBS`] must be: a handful of example jobs.
const DEMO_JOBS_FILE: Rules = Rules::capped(1024 * 1024, "a demo jobs file may hold");

/// How a host runs.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The directory of `*.wasm` plugins, loaded and then watched.
    pub plugin_dir: PathBuf,
    /// The grants file (see [`crate::grants`]), read before the plugins load and then
    /// watched; the CLI's default is `jobhost.toml` in the user's configuration directory,
    /// outside the plugin directory. A missing file grants nothing.
    pub grants_file: PathBuf,
    /// The host's own credentials, which no secret of the grants file may name.
    pub host_secrets: HostSecrets,
    /// The worker's settings; its [`telemetry`](WorkerConfig::telemetry) is the host's,
    /// which every component emits into.
    pub worker: WorkerConfig,
    /// The metrics the admin API serves on `GET /metrics`: attached to the worker's
    /// telemetry by the caller (see [`telemetry()`]).
    pub metrics: Metrics,
    /// The recent activity the dashboard shows: attached to the worker's telemetry by the
    /// caller (see [`telemetry()`]).
    pub activity: Activity,
    /// The engine's settings, its compiled-plugin cache included.
    pub engine: EngineConfig,
    /// A file of `{"job_type": ..., "payload": ...}` lines to enqueue once the plugins
    /// are loaded.
    pub demo_jobs: Option<PathBuf>,
    /// Who may call the admin API: its token and the host names it answers to.
    pub admin: AdminAccess,
}

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The plugin directory cannot be read.
    #[error("cannot read the plugin directory `{}`: {cause}", path.display())]
    PluginDir {
        /// The directory.
        path: PathBuf,
        /// Why; in the message, so not also a `source()` that a chain would print twice.
        cause: std::io::Error,
    },
    /// The engine refused its settings. Its message names the cause (e.g. the io error of
    /// the cache directory), so it is not also a `source()` that a chain would repeat.
    #[error("{0}")]
    Engine(EngineError),
    /// The grants file is refused; its message names the file and the line.
    #[error(transparent)]
    Grants(#[from] GrantsError),
}

/// A telemetry that `metrics` and `activity` watch: the host's, to give the worker (and a
/// RabbitMQ backend) so that what they emit is what the admin API serves.
pub fn telemetry(metrics: &Metrics, activity: &Activity) -> Telemetry {
    Telemetry::builder()
        .attach(metrics.clone())
        .attach(activity.clone())
        .build()
}

/// Run a host on `backend`, serving the admin API on `admin`, until `shutdown`.
pub async fn run<B: AdminBackend>(
    backend: B,
    admin: TcpListener,
    config: HostConfig,
    shutdown: CancellationToken,
) -> Result<(), HostError> {
    // Canonical, because the watcher reports changes by canonical path: a file loaded as
    // `plugins/a.wasm` and changed as `/srv/plugins/a.wasm` would be two plugins claiming
    // the same jobs.
    let dir = std::fs::canonicalize(&config.plugin_dir).map_err(|cause| HostError::PluginDir {
        path: config.plugin_dir.clone(),
        cause,
    })?;
    let Some(grants) = read_grants(&config, &shutdown).await? else {
        return Ok(());
    };
    let engine = Engine::new(config.engine.clone()).map_err(HostError::Engine)?;
    engine.grants().replace(grants);
    let telemetry = config.worker.telemetry.clone();
    let mut config = config;
    config.worker.fleet = Fleet::new(backend.clone(), telemetry.clone());
    // Before any queue is consumed, so a queue the file pauses is never consumed at all.
    config
        .worker
        .fleet
        .pause_in_file(engine.grants().current().paused());
    let pool = engine.clone();
    config.metrics.watch_pool(move || pool.instances_in_use());
    let plugins = Plugins::new();
    let declaring = backend.clone();
    let loader = Loader::new(engine.clone(), plugins.clone())
        .reporting(telemetry.clone())
        .granting(config.grants_file.clone(), config.host_secrets.clone())
        .declaring(Arc::new(move |queue| {
            let backend = declaring.clone();
            Box::pin(async move { backend.declare(&queue).await })
        }));
    if !load_plugins(&loader, &dir, &shutdown).await? {
        return Ok(());
    }
    let state = AdminState {
        backend: backend.clone(),
        plugins: plugins.clone(),
        granularity: config.worker.retry_granularity,
        access: config.admin.clone(),
        metrics: config.metrics.clone(),
        activity: config.activity.clone(),
        telemetry,
        grants: engine.grants().clone(),
        fleet: config.worker.fleet.clone(),
        batches: Board::default(),
    };
    serve(loader, dir, admin, state, config, shutdown).await;
    Ok(())
}

/// The grants file, read off the runtime; none when shutdown came first.
async fn read_grants(
    config: &HostConfig,
    shutdown: &CancellationToken,
) -> Result<Option<Grants>, HostError> {
    let reading = {
        let (file, host_secrets) = (config.grants_file.clone(), config.host_secrets.clone());
        tokio::task::spawn_blocking(move || Grants::load(&file, &host_secrets))
    };
    let grants = tokio::select! {
        () = shutdown.cancelled() => return Ok(None),
        read = reading => read.map_err(|err| GrantsError::Read {
            file: config.grants_file.clone(),
            cause: std::io::Error::other(err),
        })??,
    };
    let granted = grants.plugins().count();
    match std::fs::exists(&config.grants_file) {
        Ok(true) => info!(file = %config.grants_file.display(), plugins = granted, "grants loaded"),
        _ => {
            info!(file = %config.grants_file.display(), "no grants file: plugins are granted nothing beyond the sandbox")
        }
    }
    Ok(Some(grants))
}

/// Load every plugin of `dir`; false when shutdown came first. Each load ends within the
/// engine's load deadline, so shutdown need not wait for them.
async fn load_plugins(
    loader: &Loader,
    dir: &Path,
    shutdown: &CancellationToken,
) -> Result<bool, HostError> {
    let loaded = tokio::select! {
        () = shutdown.cancelled() => return Ok(false),
        loaded = loader.load_dir(dir) => loaded,
    };
    let loaded = loaded.map_err(|cause| HostError::PluginDir {
        path: dir.to_owned(),
        cause,
    })?;
    if loaded == 0 {
        warn!(dir = %dir.display(), "no plugin loaded yet: build some with `jobhost build`, or drop a *.wasm into the directory");
    } else {
        info!(loaded, dir = %dir.display(), "plugins loaded");
    }
    Ok(true)
}

/// Follow the plugin directory, serve the admin API (and the demo's jobs), and work the
/// queues until `shutdown`; then wait for every task.
async fn serve<B: AdminBackend>(
    loader: Loader,
    dir: PathBuf,
    admin: TcpListener,
    state: AdminState<B>,
    config: HostConfig,
    shutdown: CancellationToken,
) {
    let mut tasks = JoinSet::new();
    let watch_shutdown = shutdown.clone();
    tasks.spawn(async move {
        if let Err(err) = reload::watch(loader, &dir, watch_shutdown).await {
            error!(error = %err, dir = %dir.display(), "cannot watch the plugin directory: hot reload is off");
        }
    });
    let addr = admin
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    info!(backend = B::KIND, "admin API listening on http://{addr}");
    info!(
        "dashboard on http://{addr}/: `jobhost dashboard`, given this host's `--admin`, prints a link that signs a browser in"
    );
    if let Some(file) = config.demo_jobs {
        let state = state.clone();
        tasks.spawn(async move { enqueue_demo(&file, &state).await });
    }
    let (backend, plugins) = (state.backend.clone(), state.plugins.clone());
    let (fleet, control, stop) = (state.fleet.clone(), backend.clone(), shutdown.clone());
    tasks.spawn(async move { fleet.follow(&control, stop).await });
    let (fleet, grants, stop) = (state.fleet.clone(), state.grants.clone(), shutdown.clone());
    tasks.spawn(async move { fleet.follow_grants(&grants, stop).await });
    // The caps and rate limits follow the grants file the loader reloads.
    // Whichever host settles a scheduled job records how it ended beside its firing.
    let endings = Endings::new(backend.clone(), state.grants.clone(), plugins.clone());
    let telemetry = config.worker.telemetry.with(endings);
    // Attempts that do not complete are recorded where every host can read them.
    let worker = WorkerConfig {
        caps: state.grants.clone(),
        telemetry,
        recorder: Some(broker::recorder(backend.clone())),
        ..config.worker
    };
    let scheduler = Scheduler::new(
        backend.clone(),
        state.grants.clone(),
        plugins.clone(),
        state.telemetry.clone(),
    );
    tasks.spawn(scheduler.run(shutdown.clone()));
    // Every host folds the batch log, so any of them answers for a batch and fires what
    // falls due.
    let keeper = Keeper::new(backend.clone(), plugins.clone(), state.batches.clone());
    tasks.spawn(keeper.run(shutdown.clone()));
    tasks.spawn(admin::serve(admin, state, shutdown.clone()));
    Worker::new(backend, plugins, worker).run(shutdown).await;
    while tasks.join_next().await.is_some() {}
    info!("host stopped");
}

/// A line of the demo jobs file.
#[derive(Debug, Deserialize)]
struct DemoJob {
    job_type: String,
    payload: serde_json::Value,
}

/// Enqueue every job of `file` whose job type a loaded plugin serves.
async fn enqueue_demo<B: AdminBackend>(file: &Path, state: &AdminState<B>) {
    let text = match files::read_async(file, DEMO_JOBS_FILE)
        .await
        .and_then(files::utf8)
    {
        Ok(text) => text,
        Err(err) => {
            error!(file = %file.display(), error = %err, "cannot read the demo jobs");
            return;
        }
    };
    let registry = state.plugins.current();
    let mut enqueued = 0;
    for (index, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line_no = index + 1;
        let job: DemoJob = match serde_json::from_str(line) {
            Ok(job) => job,
            Err(err) => {
                warn!(file = %file.display(), line = line_no, error = %err, "skipping a demo line that is not {{\"job_type\", \"payload\"}}");
                continue;
            }
        };
        let Some(route) = registry.route(&job.job_type) else {
            warn!(job_type = %job.job_type, line = line_no, "skipping a demo job no loaded plugin serves");
            continue;
        };
        match admin::enqueue(
            &state.backend,
            &route.queue,
            &job.job_type,
            &job.payload,
            EnqueueOptions::new(),
            state.granularity,
        )
        .await
        {
            Ok(done) => {
                info!(job_type = %job.job_type, job_id = %done.job_id, "demo job enqueued");
                enqueued += 1;
            }
            Err(err) => error!(job_type = %job.job_type, error = %err, "demo job not enqueued"),
        }
    }
    info!(enqueued, file = %file.display(), "demo jobs enqueued");
}
