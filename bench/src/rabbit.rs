//! Throughput on RabbitMQ: pre-published no-op jobs drained by the host (worker, RabbitMQ
//! backend, no-op plugin), by a raw lapin consume+ack loop on a queue of the same shape
//! and prefetch (the broker's limit), and by a `queuey` 1.x worker with a native no-op.
//!
//! Each contender drains at prefetch 16, both crates' default, where every one of them
//! waits on the broker, and at prefetch 200, where the consumer's own cost shows
//! (BENCHMARKS.md, "Method"). Besides the drain rate, each drain records the process's CPU time per job: the
//! contenders run one at a time in this process and the queue is filled before the clock
//! starts, so that is what the consumer costs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::envelope::Envelope;
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::worker::{Plugins, Unit, WorkerConfig};
use jobhost_sdk::QueueConfig;

use crate::Sizes;
use crate::amqp::{self, DrainingWorker, queue_name};
use crate::cpu::{Spent, Stopwatch};
use crate::memory::{noop_envelope, rate};
use crate::peer::{self, PeerQueues, Tally};
use crate::report::{Report, Row, Samples, Target};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, plugin_unit, single_job};

/// How long draining one queue may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(600);

/// The prefetches every contender drains at, in this order in each round.
const PREFETCHES: [u16; 2] = [16, 200];

/// What one drain measured.
pub(crate) struct Drained {
    jobs_per_s: f64,
    cpu_per_job: Duration,
    samples: Samples,
}

impl Drained {
    pub(crate) fn new(jobs: usize, spent: Spent, samples: Samples) -> Self {
        Self {
            jobs_per_s: rate(jobs, spent.wall),
            cpu_per_job: spent.cpu / u32::try_from(jobs.max(1)).unwrap_or(u32::MAX),
            samples,
        }
    }
}

/// Every round's measurements of one contender at one prefetch.
#[derive(Default)]
pub(crate) struct Rounds {
    rates: Vec<f64>,
    cpu: Vec<Duration>,
    samples: Vec<Duration>,
}

impl Rounds {
    pub(crate) fn push(&mut self, drained: Drained) {
        self.rates.push(drained.jobs_per_s);
        self.cpu.push(drained.cpu_per_job);
        self.samples.extend(drained.samples.into_inner());
    }

    /// The median round's rate and CPU per job (each its own median), all samples.
    pub(crate) fn row(self, label: String) -> Row {
        let Self {
            mut rates,
            mut cpu,
            samples,
        } = self;
        cpu.sort_unstable();
        Row::new(label, median(&mut rates), Samples::new(samples))
            .cpu(cpu.get(cpu.len() / 2).copied())
    }
}

/// The four ways of draining a queue, measured in this order in each round.
#[derive(Debug, Clone, Copy)]
enum Contender {
    Raw,
    Queuey,
    Native,
    Wasm,
}

impl Contender {
    const ALL: [Self; 4] = [Self::Raw, Self::Queuey, Self::Native, Self::Wasm];

    fn label(self, prefetch: u16) -> String {
        let who = match self {
            Self::Raw => "raw lapin consume+ack",
            Self::Queuey => "queuey 1.x native no-op",
            Self::Native => "jobhost + native no-op",
            Self::Wasm => "jobhost + wasm no-op",
        };
        format!("rabbitmq p{prefetch}: {who}")
    }

    fn queue(self) -> String {
        match self {
            Self::Raw => queue_name("raw"),
            Self::Queuey => queue_name("queuey"),
            Self::Native => queue_name("host-native"),
            Self::Wasm => queue_name("host"),
        }
    }
}

/// What every contender shares.
struct Bench {
    url: String,
    connection: lapin::Connection,
    backend: Arc<RabbitMqBackend>,
    plugin: Plugin,
}

impl Bench {
    /// Fill the contender's queue with `jobs` no-op jobs, drain it with `prefetch`, delete
    /// it.
    async fn drain(
        &self,
        contender: Contender,
        prefetch: u16,
        jobs: usize,
    ) -> anyhow::Result<Drained> {
        let queue = contender.queue();
        let manifest = single_job(self.plugin.manifest(), NOOP_JOB, &queue, Some(prefetch));
        let measured = match contender {
            Contender::Raw => self.raw(&manifest.queues[0], jobs).await,
            Contender::Queuey => self.queuey(&manifest.queues[0], jobs).await,
            Contender::Native => {
                through_host(&self.backend, native_noop(manifest), &queue, jobs).await
            }
            Contender::Wasm => {
                let unit = plugin_unit(&self.plugin, manifest);
                through_host(&self.backend, unit, &queue, jobs).await
            }
        };
        amqp::delete(&self.connection, &queue).await?;
        measured
    }

    async fn raw(&self, config: &QueueConfig, jobs: usize) -> anyhow::Result<Drained> {
        self.backend.declare(config).await?;
        amqp::fill(
            &self.backend,
            (0..jobs).map(|_| noop_envelope(&config.name)),
        )
        .await?;
        let (spent, samples) =
            amqp::consume_and_ack(&self.connection, &config.name, config.prefetch, jobs).await?;
        Ok(Drained::new(jobs, spent, samples))
    }

    async fn queuey(&self, config: &QueueConfig, jobs: usize) -> anyhow::Result<Drained> {
        peer::name_queues(&queue_name("queuey"), &queue_name("queuey-retry"));
        peer::set_noop_prefetch(config.prefetch);
        let spent = through_queuey(&self.url, &self.backend, config, jobs).await?;
        Ok(Drained::new(jobs, spent, Samples::default()))
    }
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.rabbit_jobs;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let engine = engine(EngineConfig::default())?;
    let bench = Bench {
        url: url.clone(),
        connection,
        backend: amqp::jobhost_backend(url).await?,
        plugin: load_fixture(&engine, "noop").await?,
    };
    // Rounds interleave the contenders and prefetches, so a burst of load from elsewhere
    // on the machine does not land on one of them only; each row is the median round.
    let mut rounds: [[Rounds; 4]; 2] = Default::default();
    for _ in 0..sizes.rounds {
        for (at, prefetch) in rounds.iter_mut().zip(PREFETCHES) {
            for (rounds, contender) in at.iter_mut().zip(Contender::ALL) {
                rounds.push(bench.drain(contender, prefetch, jobs).await?);
            }
        }
    }
    bench.backend.close().await;

    let [narrow, wide] = rounds;
    let mut rows = compare(PREFETCHES[0], narrow, &NARROW_TARGETS);
    rows.extend(compare(PREFETCHES[1], wide, &WIDE_TARGETS));
    Ok(Report {
        rows,
        details: vec![format!(
            "rabbitmq: {jobs} pre-published jobs per contender, prefetch and round, {} rounds (median shown), prefetch {PREFETCHES:?}, each on a queue of its own; jobhost with `WorkerConfig::default()`; cpu/job is the process's user + system CPU over the drain (publishing excluded) per job",
            sizes.rounds,
        )],
    })
}

/// What jobhost + wasm must reach at one prefetch: drain rate against raw lapin and
/// against queuey, CPU per job against queuey.
pub(crate) struct Targets {
    rate_vs_raw: Target,
    rate_vs_queuey: Target,
    cpu_vs_queuey: Option<Target>,
}

/// Prefetch 16, where every contender waits on the broker.
const NARROW_TARGETS: Targets = Targets {
    rate_vs_raw: Target::RatioAtLeast(0.9),
    rate_vs_queuey: Target::RatioAtLeast(1.0),
    cpu_vs_queuey: None,
};

/// Prefetch 200, the targets of BENCHMARKS.md, "Comparison with peers".
pub(crate) const WIDE_TARGETS: Targets = Targets {
    rate_vs_raw: Target::RatioAtLeast(0.8),
    rate_vs_queuey: Target::RatioAtLeast(1.2),
    cpu_vs_queuey: Some(Target::CpuRatioAtMost(0.7)),
};

/// The rows of one prefetch: each contender, then jobhost against the references.
fn compare(prefetch: u16, rounds: [Rounds; 4], targets: &Targets) -> Vec<Row> {
    let [raw, queuey, native, wasm] = {
        let mut contenders = Contender::ALL.into_iter();
        rounds.map(|rounds| {
            let contender = contenders.next().expect("one round set per contender");
            rounds.row(contender.label(prefetch))
        })
    };
    let native = native.against(&raw, None);
    let mut rows = versus(wasm, raw, queuey, targets);
    rows.insert(2, native);
    rows
}

/// The references, then jobhost's `ours` against each: drain rate, then CPU per job.
pub(crate) fn versus(ours: Row, raw: Row, queuey: Row, targets: &Targets) -> Vec<Row> {
    let compared = [
        ours.clone().against(&raw, Some(targets.rate_vs_raw)),
        ours.clone().against(&queuey, Some(targets.rate_vs_queuey)),
        ours.cpu_against(&raw, None),
        ours.cpu_against(&queuey, targets.cpu_vs_queuey),
    ];
    [raw, queuey].into_iter().chain(compared).collect()
}

fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Fill `queue` with `jobs` no-op jobs, then drain it with a worker serving `unit`.
pub(crate) async fn through_host(
    backend: &Arc<RabbitMqBackend>,
    unit: Unit,
    queue: &str,
    jobs: usize,
) -> anyhow::Result<Drained> {
    let envelopes = (0..jobs).map(|_| noop_envelope(queue)).collect();
    through_host_with(backend, unit, envelopes, WorkerConfig::default()).await
}

/// Fill the queues `envelopes` name with them, then drain them with a worker serving
/// `unit`, run with `config`.
pub(crate) async fn through_host_with(
    backend: &Arc<RabbitMqBackend>,
    unit: Unit,
    envelopes: Vec<Envelope>,
    config: WorkerConfig,
) -> anyhow::Result<Drained> {
    let plugins = Plugins::new();
    plugins.install(unit)?;
    let jobs = envelopes.len();
    let running = DrainingWorker::start(backend, plugins, envelopes, config).await?;
    let drained = running.meter.wait_for_acks(jobs as u64, DEADLINE).await;
    let spent = running.started.read()?;
    let meter = running.meter.clone();
    running.stop().await?;
    drained?;
    Ok(Drained::new(jobs, spent, meter.samples()))
}

/// Fill the peer's no-op queue (declared with `config`, the same shape) and drain it; the
/// clocks start before the worker is built, as the host's start before it runs.
async fn through_queuey(
    url: &str,
    backend: &Arc<RabbitMqBackend>,
    config: &QueueConfig,
    jobs: usize,
) -> anyhow::Result<Spent> {
    backend.declare(config).await?;
    amqp::fill(backend, (0..jobs).map(|_| noop_envelope(&config.name))).await?;
    let tally = Arc::new(Tally::default());
    let connected = peer::connect(url).await?;
    let start = Stopwatch::start()?;
    let running = peer::Running::start(connected, PeerQueues::Noop, tally.clone()).await?;
    let drained = peer::wait_for(&tally, jobs as u64, DEADLINE).await;
    let spent = start.read()?;
    running.stop().await?;
    drained?;
    Ok(spent)
}
