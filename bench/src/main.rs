//! Benchmarks of jobhost: against the broker's limit, a native handler, the bare wasm floor
//! and the `queuey` 1.x peer, each measured against its reference in the same run.
//!
//! ```sh
//! cargo run --release -p jobhost-bench -- all            # the full suite (BENCHMARKS.md)
//! cargo run --release -p jobhost-bench -- all --quick    # small sizes, a smoke test
//! ```
//!
//! The RabbitMQ scenarios use `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`),
//! create queues named `bench-<run id>.*` and delete them afterwards.

mod amqp;
mod amqprs_backend;
mod amqprs_floor;
mod blackbox;
mod caps;
mod cluster;
mod cpu;
mod events;
mod http;
mod memory;
mod metered;
mod peer;
mod rabbit;
mod reload;
mod report;
mod resources;
mod retries;
mod units;
mod unusual;

use clap::{Parser, Subcommand};

use report::Report;

#[derive(Debug, Parser)]
#[command(about = "Benchmarks of jobhost against its references")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every scenario, then the table.
    All(Options),
    /// The sandbox's and the worker's cost on the memory backend, and the wasm floor.
    Memory(Options),
    /// Pre-published no-op jobs through the host, raw lapin and queuey, at prefetch 16 and
    /// 200: drain rate and CPU per job.
    Rabbitmq(Options),
    /// The drain and CPU targets black-box: the `jobhost run` binary, queuey, raw lapin and the
    /// floor of a lapin consumer, each a process of its own, draining pre-published no-op
    /// jobs at prefetch 200; drain rate and the process's CPU per job.
    Blackbox(Options),
    /// Jobs that fail once, through the host and queuey.
    Retries(Options),
    /// What a concurrency cap's permits and a rate limit's tokens cost per job: no-op jobs
    /// drained without a limit, under a queue cap, under a queue and a key cap, and under a
    /// key rate limit, none of which binds.
    Caps(Options),
    /// Time from an atomic rename into the plugin directory to the first job served.
    Reload(Options),
    /// Memory use and start time.
    Resources(Options),
    /// Outbound HTTP through a plugin against the same local server called natively.
    Http(Options),
    /// Jobs that wait: `jobhost run` keeping 1,000 and 10,000 jobs in flight that GET a
    /// local server answering after 1 s (`JOBHOST_BENCH_WAIT_LATENCY_MS`,
    /// `JOBHOST_BENCH_WAIT_INFLIGHT`), against the ideal and a raw tokio + hyper client;
    /// RSS per job in flight (not part of `all`).
    Wait(Options),
    /// One host on a three-node cluster with quorum queues against one node with classic
    /// queues (needs `--cluster-url`; not part of `all`).
    Cluster(Options),
    /// Valid messages with unusual headers (strings that are not UTF-8, every field type),
    /// each with an ordinary message behind it, consumed by raw lapin and by amqprs:
    /// whether each client gets both on the connection it started with (not part of `all`).
    Unusual(Broker),
    /// Internal: measure RSS in a fresh process and print it as JSON.
    #[command(hide = true)]
    RssProbe,
    /// Internal: a `blackbox` reference consumer, in a process of its own.
    #[command(hide = true)]
    BlackboxConsumer(blackbox::ConsumerArgs),
    /// Internal: the `wait` scenario's server, answering after `--latency-ms`.
    #[command(hide = true)]
    WaitServer {
        #[arg(long)]
        latency_ms: u64,
    },
}

/// The broker to run against.
#[derive(Debug, Clone, clap::Args)]
struct Broker {
    /// The broker for the RabbitMQ scenarios.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
}

#[derive(Debug, Clone, clap::Args)]
struct Options {
    /// Small sizes: checks that every scenario runs, its numbers mean little.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    broker: Broker,
    /// The nodes of a RabbitMQ cluster, comma-separated, for the `cluster` scenario.
    #[arg(long, env = "JOBHOST_CLUSTER_AMQP")]
    cluster_url: Option<String>,
}

/// How much work each scenario does.
#[derive(Debug, Clone)]
pub(crate) struct Sizes {
    pub(crate) memory_jobs: usize,
    pub(crate) rabbit_jobs: usize,
    pub(crate) retry_jobs: usize,
    pub(crate) reload_swaps: usize,
    pub(crate) starts: usize,
    /// Requests of the outbound HTTP scenario, each way.
    pub(crate) http_requests: usize,
    /// Rounds of the RabbitMQ throughput scenario.
    pub(crate) rounds: usize,
    pub(crate) amqp_url: String,
    pub(crate) cluster_url: Option<String>,
}

impl Sizes {
    fn of(options: &Options) -> Self {
        let (memory_jobs, rabbit_jobs, retry_jobs, reload_swaps, starts, rounds) = if options.quick
        {
            (400, 1_000, 200, 4, 1, 1)
        } else {
            (20_000, 20_000, 10_000, 20, 3, 3)
        };
        let http_requests = if options.quick { 200 } else { 5_000 };
        Self {
            memory_jobs,
            rabbit_jobs,
            retry_jobs,
            reload_swaps,
            starts,
            http_requests,
            rounds,
            amqp_url: options.broker.amqp_url.clone(),
            cluster_url: options.cluster_url.clone(),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (options, scenarios): (Options, &[Scenario]) = match cli.command {
        Command::RssProbe => return resources::probe().await,
        Command::BlackboxConsumer(args) => return blackbox::consume(args).await,
        Command::WaitServer { latency_ms } => return blackbox::wait::serve(latency_ms).await,
        Command::Wait(options) => {
            let report = blackbox::wait::run(&Sizes::of(&options), options.quick).await?;
            println!("{}", report.render());
            return Ok(());
        }
        Command::Unusual(broker) => return unusual::run(&broker.amqp_url).await,
        Command::All(options) => (options, &Scenario::ALL),
        Command::Memory(options) => (options, &[Scenario::Memory]),
        Command::Rabbitmq(options) => (options, &[Scenario::Rabbitmq]),
        Command::Blackbox(options) => (options, &[Scenario::Blackbox]),
        Command::Retries(options) => (options, &[Scenario::Retries]),
        Command::Caps(options) => (options, &[Scenario::Caps]),
        Command::Reload(options) => (options, &[Scenario::Reload]),
        Command::Resources(options) => (options, &[Scenario::Resources]),
        Command::Http(options) => (options, &[Scenario::Http]),
        Command::Cluster(options) => (options, &[Scenario::Cluster]),
    };
    let sizes = Sizes::of(&options);
    let mut report = Report::default();
    for scenario in scenarios {
        eprintln!("running {scenario:?}...");
        report.extend(scenario.run(&sizes).await?);
    }
    println!("{}", report.render());
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Scenario {
    Memory,
    Rabbitmq,
    Blackbox,
    Retries,
    Caps,
    Reload,
    Resources,
    Http,
    Cluster,
}

impl Scenario {
    const ALL: [Self; 8] = [
        Self::Memory,
        Self::Rabbitmq,
        Self::Blackbox,
        Self::Retries,
        Self::Caps,
        Self::Reload,
        Self::Resources,
        Self::Http,
    ];

    async fn run(self, sizes: &Sizes) -> anyhow::Result<Report> {
        match self {
            Self::Memory => memory::run(sizes).await,
            Self::Rabbitmq => rabbit::run(sizes).await,
            Self::Blackbox => blackbox::run(sizes).await,
            Self::Retries => retries::run(sizes).await,
            Self::Caps => caps::run(sizes).await,
            Self::Reload => reload::run(sizes).await,
            Self::Resources => resources::run(sizes).await,
            Self::Http => http::run(sizes).await,
            Self::Cluster => cluster::run(sizes).await,
        }
    }
}
