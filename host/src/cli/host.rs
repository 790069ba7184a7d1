//! `jobhost run`: a host on RabbitMQ or on the in-memory broker, until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use jobhost::activity::Activity;
use jobhost::admin::AdminAccess;
use jobhost::app::{self, DEMO_JOBS, HostConfig};
use jobhost::broker::{MemoryBackend, RabbitMqBackend, RabbitMqOptions};
use jobhost::grants::{self, HostSecrets};
use jobhost::metrics::Metrics;
use jobhost::plugin::EngineConfig;
use jobhost::policy::Granularity;
use jobhost::telemetry::Telemetry;
use jobhost::worker::WorkerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{HostArgs, broker_access, demo_server, paths};

/// Jobs at once unless `--concurrency` says otherwise: the engine's default pool of 64
/// instances less the one kept for loads.
pub(super) const DEFAULT_CONCURRENCY: u32 = 63;
/// The most `--concurrency` accepts, the most a queue's prefetch can keep delivered. Each
/// job holds a pool slot with its own reservation of address space: the engine refuses a
/// pool this machine cannot reserve, saying so (about 15,000 jobs on x86-64).
pub(super) const MAX_CONCURRENCY: u32 = 65_535;

/// `jobhost run`.
pub(super) async fn run(args: HostArgs) -> anyhow::Result<()> {
    run_until_signal(&args, CancellationToken::new()).await
}

/// Run the host until Ctrl-C, SIGTERM or `shutdown`; a signal cancels `shutdown`.
pub(super) async fn run_until_signal(
    args: &HostArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let signals = tokio::spawn(cancel_on_signal(shutdown.clone()));
    let served = serve(args, shutdown).await;
    signals.abort();
    served
}

async fn serve(args: &HostArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let dir = &args.plugins.dir;
    if !dir.is_dir() {
        bail!(
            "the plugin directory `{}` does not exist: create it, run from the directory that \
             holds `plugins/`, or pass `--plugins DIR`",
            dir.display()
        );
    }
    let admin = TcpListener::bind(&args.admin)
        .await
        .with_context(|| format!("cannot listen on `{}` for the admin API", args.admin))?;
    let bound = admin.local_addr().context("the admin API's address")?;
    let cache_dir = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => paths::default_cache_dir()?,
    };
    let token = AdminAccess::generate_token();
    let token_file = paths::token_file(
        args.token.admin_token_file.as_deref(),
        &token_key(&args.admin, bound),
    )?;
    paths::write_token(&token_file, &token)?;
    info!(file = %token_file.display(), "admin token written; the client commands and `jobhost dashboard` read it from there");
    let host_secrets = host_secrets(args, &token_file, &cache_dir);
    let _token_file = RemoveOnDrop(token_file);
    // Before the plugins load, so the demo jobs find it listening.
    let _demo_server = if args.demo {
        demo_server::start(dir).await
    } else {
        None
    };
    let (metrics, activity) = (Metrics::new(), Activity::default());
    let telemetry = app::telemetry(&metrics, &activity);
    let config = HostConfig {
        plugin_dir: dir.clone(),
        grants_file: grants_file(args)?,
        host_secrets,
        worker: WorkerConfig {
            telemetry: telemetry.clone(),
            concurrency: args.concurrency as usize,
            retry_granularity: Granularity::new(args.retry_granularity),
            max_redeliveries: args.max_redeliveries,
            broker_consumer_timeout: args.broker_consumer_timeout,
            ..WorkerConfig::default()
        },
        // One slot more than the concurrency, kept for loads: jobs never wait for the pool.
        engine: EngineConfig {
            max_instances: args.concurrency + 1,
            cache_dir: Some(cache_dir),
            max_plugin_size: args.max_plugin_size,
            ..EngineConfig::default()
        },
        demo_jobs: args.demo.then(|| dir.join(DEMO_JOBS)),
        admin: AdminAccess::new(token, &args.admin, bound),
        metrics,
        activity,
    };
    run_on_backend(args, telemetry, admin, config, shutdown).await
}

/// What no secret of the grants file may name: the admin token file, the host's cache and
/// state directories, and the broker's credentials.
fn host_secrets(args: &HostArgs, token_file: &Path, cache_dir: &Path) -> HostSecrets {
    let host_secrets = broker_access::refused_as_secrets(
        &args.broker,
        HostSecrets::default()
            .file(token_file, "the admin token file")
            .dir(cache_dir, "the host's compiled-plugin cache"),
    );
    match paths::default_state_dir() {
        Ok(state) => host_secrets.dir(state, "the host's state directory"),
        Err(_) => host_secrets,
    }
}

/// Run the host on RabbitMQ when a broker URL is given, else on the embedded backend.
async fn run_on_backend(
    args: &HostArgs,
    telemetry: Telemetry,
    admin: TcpListener,
    config: HostConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Some(url) = args.broker.amqp() else {
        warn_memory_backend();
        app::run(MemoryBackend::embedded(), admin, config, shutdown).await?;
        return Ok(());
    };
    let options = broker_access::broker_options(
        &args.broker,
        RabbitMqOptions::default().telemetry(telemetry),
    )?;
    let backend = RabbitMqBackend::connect(&url, options)
        .await
        .context("cannot connect to RabbitMQ")?;
    let backend = Arc::new(backend);
    let served = app::run(Arc::clone(&backend), admin, config, shutdown).await;
    // Acks go out in batches: closing here, before the runtime ends, sends the last of
    // them, so a stopped host hands back no job it finished.
    backend.close().await;
    Ok(served?)
}

/// `--config`, else the demo's file in the plugin directory with `--demo`, else the
/// user's: the grants file lives outside the plugin directory unless named there, because
/// whoever may drop a plugin must not thereby choose what plugins are granted.
fn grants_file(args: &HostArgs) -> anyhow::Result<PathBuf> {
    match &args.config {
        Some(file) => Ok(file.clone()),
        None if args.demo => Ok(args.plugins.dir.join(grants::FILE_NAME)),
        None => paths::default_grants_file(),
    }
}

/// The address the token file is named after: `--admin` as given, so a client given the
/// same address finds it, or the bound address when the port was left to the system (`:0`),
/// which is the one the host logs and a client is then given.
fn token_key(configured: &str, bound: SocketAddr) -> String {
    if configured.ends_with(":0") {
        bound.to_string()
    } else {
        configured.to_owned()
    }
}

/// Removes the token file when the host stops, best effort: a stale token opens nothing.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn warn_memory_backend() {
    let rule = "=".repeat(78);
    warn!("{rule}");
    warn!("NO BROKER: running on the IN-MEMORY backend (no --amqp URL, no AMQP_URL).");
    warn!(
        "NOTHING SURVIVES A RESTART: queued jobs, retries and dead letters die with this process."
    );
    warn!("For real work run RabbitMQ and pass `--amqp amqp://user:pass@host:5672/%2f`.");
    warn!("{rule}");
}

/// Cancel `shutdown` on the first Ctrl-C (SIGINT) or SIGTERM.
async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(err) => {
                warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the host");
                let _ = tokio::signal::ctrl_c().await;
                shutdown.cancel();
                return;
            }
        };
    let signal = tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    };
    info!(
        signal,
        "shutting down: running jobs finish, nothing new is pulled"
    );
    shutdown.cancel();
}
