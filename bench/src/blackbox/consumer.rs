//! The reference consumers of the black-box scenario, each run by this binary in a child
//! process of its own (the hidden `blackbox-consumer` subcommand), so that the CPU the
//! parent reads from `/proc/<pid>/stat` is the consumer's alone.
//!
//! # Contract
//! The child consumes `--jobs` no-op jobs from `--queue` at `--prefetch`, then prints
//! [`DRAINED`] on a line of its own on stdout and waits to be killed (`SIGTERM`, whose
//! default action ends it: nothing is left to settle). Errors go to stderr with a non-zero
//! exit.

use std::io::Write as _;
use std::sync::Arc;

use jobhost::broker::Backend;
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::worker::{Plugins, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::amqp;
use crate::amqprs_backend::AmqprsBackend;
use crate::amqprs_floor;
use crate::metered::{Meter, Metered};
use crate::peer::{self, PeerQueues, Tally};
use crate::units::{engine, load_fixture, plugin_unit};

use super::{DEADLINE, FIXTURE};

/// What a child prints once it has completed every job.
pub(crate) const DRAINED: &str = "drained";

/// A consumer this binary runs in a child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Peer {
    /// A lapin consume loop that acks each delivery: the broker's limit.
    Raw,
    /// A lapin consume loop that acks 50 deliveries at a time with `multiple`, no task
    /// per delivery: the least CPU per job of any consumer built on lapin.
    Floor,
    /// The floor calling the no-op plugin in a fresh instance per delivery: the least CPU
    /// per job of a host on lapin that keeps an instance per job.
    FloorWasm,
    /// The floor's loop on `amqprs`, whose socket I/O runs on the runtime's threads: what
    /// a client other than lapin could save.
    AmqprsFloor,
    /// The `amqprs` floor with an instance per delivery, as [`Peer::FloorWasm`].
    AmqprsFloorWasm,
    /// A `queuey` 1.x worker with a native no-op handler.
    Queuey,
    /// The host's own worker on its RabbitMQ backend (lapin), serving the no-op plugin:
    /// `jobhost run` without its CLI, admin server and log, the control for the next one.
    Worker,
    /// The host's own worker on the bench's consume-only amqprs backend, serving the no-op
    /// plugin: what a host ported to amqprs would spend per job.
    AmqprsWorker,
}

impl Peer {
    /// Whether each delivery calls the no-op plugin.
    fn calls_wasm(self) -> bool {
        matches!(self, Self::FloorWasm | Self::AmqprsFloorWasm)
    }
}

/// The hidden subcommand's arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Args {
    #[arg(long, value_enum)]
    pub(crate) peer: Peer,
    #[arg(long)]
    pub(crate) queue: String,
    #[arg(long)]
    pub(crate) prefetch: u16,
    #[arg(long)]
    pub(crate) jobs: usize,
    #[arg(long)]
    pub(crate) amqp_url: String,
}

/// The child process: drain, say so, wait for the parent's `SIGTERM`.
pub(crate) async fn consume(args: Args) -> anyhow::Result<()> {
    // Kept until the process is killed: stopping the worker would cost CPU after the drain
    // while the parent is still reading it.
    let _worker = match args.peer {
        Peer::Raw => {
            let connection = amqp::connect(&args.amqp_url).await?;
            amqp::consume_and_ack(&connection, &args.queue, args.prefetch, args.jobs).await?;
            None
        }
        Peer::Floor | Peer::FloorWasm => {
            let plugin = noop_plugin(args.peer).await?;
            let connection = amqp::connect(&args.amqp_url).await?;
            amqp::consume_and_ack_multiple(
                &connection,
                &args.queue,
                args.prefetch,
                args.jobs,
                plugin.as_ref(),
            )
            .await?;
            None
        }
        Peer::AmqprsFloor | Peer::AmqprsFloorWasm => {
            let plugin = noop_plugin(args.peer).await?;
            amqprs_floor::consume_and_ack_multiple(
                &args.amqp_url,
                &args.queue,
                args.prefetch,
                args.jobs,
                plugin.as_ref(),
            )
            .await?;
            None
        }
        Peer::Worker | Peer::AmqprsWorker => {
            drain_through_worker(&args).await?;
            None
        }
        Peer::Queuey => {
            // The retry queue is never declared: the worker consumes the no-op queue only.
            peer::name_queues(&args.queue, &format!("{}.unused-retry", args.queue));
            peer::set_noop_prefetch(args.prefetch);
            let tally = Arc::new(Tally::default());
            let connected = peer::connect(&args.amqp_url).await?;
            let running = peer::Running::start(connected, PeerQueues::Noop, tally.clone()).await?;
            peer::wait_for(&tally, args.jobs as u64, DEADLINE).await?;
            Some(running)
        }
    };
    announce()?;
    std::future::pending().await
}

/// Drain the queue with the host's [`Worker`] serving the no-op plugin, on lapin or on
/// amqprs as `args.peer` says. The worker keeps running until the process is killed.
async fn drain_through_worker(args: &Args) -> anyhow::Result<()> {
    let engine = engine(EngineConfig::default())?;
    let plugin = load_fixture(&engine, FIXTURE).await?;
    let plugins = Plugins::new();
    plugins.install(plugin_unit(&plugin, plugin.manifest().clone()))?;
    let meter = Arc::new(Meter::default());
    if args.peer == Peer::AmqprsWorker {
        let backend = Arc::new(AmqprsBackend::connect(&args.amqp_url).await?);
        serve(Metered::new(backend, meter.clone()), plugins);
    } else {
        let backend = amqp::jobhost_backend(&args.amqp_url).await?;
        serve(Metered::new(backend, meter.clone()), plugins);
    }
    meter.wait_for_acks(args.jobs as u64, DEADLINE).await
}

/// Run a worker with its defaults on `backend`, never cancelled: it serves until the
/// parent's `SIGTERM`.
fn serve(backend: impl Backend, plugins: Plugins) {
    let worker = Worker::new(backend, plugins, WorkerConfig::default());
    tokio::spawn(worker.run(CancellationToken::new()));
}

/// The no-op plugin, loaded before the consumer starts (its first delivery starts the
/// measurement), when `peer` calls it.
async fn noop_plugin(peer: Peer) -> anyhow::Result<Option<Plugin>> {
    if !peer.calls_wasm() {
        return Ok(None);
    }
    let engine = engine(EngineConfig::default())?;
    Ok(Some(load_fixture(&engine, FIXTURE).await?))
}

fn announce() -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{DRAINED}")?;
    Ok(stdout.flush()?)
}
