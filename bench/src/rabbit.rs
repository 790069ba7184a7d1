//! Throughput on RabbitMQ: pre-published no-op jobs drained by the host (worker, RabbitMQ
//! backend, no-op plugin), by a raw lapin consume+ack loop on a queue of the same shape
//! and prefetch (the broker's limit), and by a `queuey` 1.x worker with a native no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::worker::{Plugins, Unit};
use jobhost_sdk::QueueConfig;

use crate::Sizes;
use crate::amqp::{self, DrainingWorker, queue_name};
use crate::memory::{noop_envelope, rate};
use crate::peer::{self, PeerQueues, Tally};
use crate::report::{Report, Row, Samples, Target};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, plugin_unit, single_job};

/// How long draining one queue may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(600);

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

    fn label(self) -> &'static str {
        match self {
            Self::Raw => "rabbitmq: raw lapin consume+ack",
            Self::Queuey => "rabbitmq: queuey 1.x native no-op",
            Self::Native => "rabbitmq: jobhost + native no-op",
            Self::Wasm => "rabbitmq: jobhost + wasm no-op",
        }
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
    /// Fill the contender's queue with `jobs` no-op jobs, drain it, delete it.
    async fn drain(&self, contender: Contender, jobs: usize) -> anyhow::Result<(f64, Samples)> {
        let queue = contender.queue();
        let manifest = single_job(self.plugin.manifest(), NOOP_JOB, &queue, None);
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

    async fn raw(&self, config: &QueueConfig, jobs: usize) -> anyhow::Result<(f64, Samples)> {
        self.backend.declare(config).await?;
        amqp::fill(
            &self.backend,
            (0..jobs).map(|_| noop_envelope(&config.name)),
        )
        .await?;
        amqp::consume_and_ack(&self.connection, &config.name, config.prefetch, jobs).await
    }

    async fn queuey(&self, config: &QueueConfig, jobs: usize) -> anyhow::Result<(f64, Samples)> {
        peer::name_queues(&queue_name("queuey"), &queue_name("queuey-retry"));
        let rate = through_queuey(&self.url, &self.backend, config, jobs).await?;
        Ok((rate, Samples::default()))
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
    // Rounds interleave the contenders, so a burst of load from elsewhere on the machine
    // does not land on one of them only; each row is the median round.
    let mut rates: [Vec<f64>; 4] = Default::default();
    let mut samples: [Vec<Duration>; 4] = Default::default();
    for _ in 0..sizes.rounds {
        for (i, contender) in Contender::ALL.into_iter().enumerate() {
            let (rate, round) = bench.drain(contender, jobs).await?;
            rates[i].push(rate);
            samples[i].extend(round.into_inner());
        }
    }
    bench.backend.close().await;

    let [raw, queuey, native, wasm] = Contender::ALL.map(|contender| {
        let i = contender as usize;
        Row::new(
            contender.label(),
            median(&mut rates[i]),
            Samples::new(std::mem::take(&mut samples[i])),
        )
    });
    Ok(Report {
        rows: vec![
            raw.clone(),
            queuey.clone(),
            native.against(&raw, None),
            wasm.clone().against(&raw, Some(Target::RatioAtLeast(0.9))),
            wasm.against(&queuey, Some(Target::RatioAtLeast(1.0))),
        ],
        details: vec![format!(
            "rabbitmq: {jobs} pre-published jobs per contender and round, {} rounds (median shown), prefetch {}, each on a queue of its own",
            sizes.rounds,
            bench.plugin.manifest().queues[0].prefetch
        )],
    })
}

fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Fill `queue` with `jobs` no-op jobs, then drain it with a worker serving `unit`.
async fn through_host(
    backend: &Arc<RabbitMqBackend>,
    unit: Unit,
    queue: &str,
    jobs: usize,
) -> anyhow::Result<(f64, Samples)> {
    let plugins = Plugins::new();
    plugins.install(unit)?;
    let running =
        DrainingWorker::start(backend, plugins, (0..jobs).map(|_| noop_envelope(queue))).await?;
    let drained = running.meter.wait_for_acks(jobs as u64, DEADLINE).await;
    let elapsed = running.started.elapsed();
    let meter = running.meter.clone();
    running.stop().await?;
    drained?;
    Ok((rate(jobs, elapsed), meter.samples()))
}

/// Fill the peer's no-op queue (declared with `config`, the same shape) and drain it.
async fn through_queuey(
    url: &str,
    backend: &Arc<RabbitMqBackend>,
    config: &QueueConfig,
    jobs: usize,
) -> anyhow::Result<f64> {
    backend.declare(config).await?;
    amqp::fill(backend, (0..jobs).map(|_| noop_envelope(&config.name))).await?;
    let tally = Arc::new(Tally::default());
    let connected = peer::connect(url).await?;
    let start = Instant::now();
    let running = peer::Running::start(connected, PeerQueues::Noop, tally.clone()).await?;
    let drained = peer::wait_for(&tally, jobs as u64, DEADLINE).await;
    let elapsed = start.elapsed();
    running.stop().await?;
    drained?;
    Ok(rate(jobs, elapsed))
}
