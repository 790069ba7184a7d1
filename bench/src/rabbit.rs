//! Throughput on RabbitMQ: pre-published no-op jobs drained by the host (worker, RabbitMQ
//! backend, no-op plugin), by a raw lapin consume+ack loop on a queue of the same shape
//! and prefetch (the broker's limit), and by a `queuey` 1.x worker with a native no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::plugin::EngineConfig;
use jobhost::worker::{Plugins, Unit, Worker, WorkerConfig};
use jobhost_sdk::QueueConfig;
use tokio_util::sync::CancellationToken;

use crate::Sizes;
use crate::amqp::{self, queue_name};
use crate::memory::{noop_envelope, rate};
use crate::metered::{Meter, Metered};
use crate::peer::{self, PeerQueues, Tally};
use crate::report::{Report, Row, Samples, Target};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, plugin_unit, single_job};

/// How long draining one queue may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(600);

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.rabbit_jobs;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let backend = amqp::jobhost_backend(url).await?;
    let engine = engine(EngineConfig::default())?;
    let plugin = load_fixture(&engine, "noop").await?;
    let shape = plugin.manifest().queues[0].clone();

    let raw = {
        let queue = queue_name("raw");
        let config = QueueConfig {
            name: queue.clone(),
            ..shape.clone()
        };
        backend.declare(&config).await?;
        amqp::fill(&backend, (0..jobs).map(|_| noop_envelope(&queue))).await?;
        let measured = amqp::consume_and_ack(&connection, &queue, shape.prefetch, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let wasm = {
        let queue = queue_name("host");
        let unit = plugin_unit(
            &plugin,
            single_job(plugin.manifest(), NOOP_JOB, &queue, None),
        );
        let measured = through_host(&backend, unit, &queue, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let native = {
        let queue = queue_name("host-native");
        let unit = native_noop(single_job(plugin.manifest(), NOOP_JOB, &queue, None));
        let measured = through_host(&backend, unit, &queue, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let queuey = {
        peer::name_queues(&queue_name("queuey"), &queue_name("queuey-retry"));
        let queue = queue_name("queuey");
        let config = QueueConfig {
            name: queue.clone(),
            ..shape
        };
        let measured = through_queuey(url, &backend, &config, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    backend.close().await;

    let raw = Row::new("rabbitmq: raw lapin consume+ack", Some(raw.0), raw.1);
    let queuey = Row::new(
        "rabbitmq: queuey 1.x native no-op",
        Some(queuey),
        Samples::default(),
    );
    let native = Row::new("rabbitmq: jobhost + native no-op", Some(native.0), native.1);
    let wasm = Row::new("rabbitmq: jobhost + wasm no-op", Some(wasm.0), wasm.1);
    Ok(Report {
        rows: vec![
            raw.clone(),
            queuey.clone(),
            native.against(&raw, None),
            wasm.clone().against(&raw, Some(Target::RatioAtLeast(0.9))),
            wasm.against(&queuey, Some(Target::RatioAtLeast(1.0))),
        ],
        details: vec![format!(
            "rabbitmq: {jobs} pre-published jobs per row, prefetch {}, each row on its own queue",
            plugin.manifest().queues[0].prefetch
        )],
    })
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
    for config in plugins.current().queues() {
        backend.declare(config).await?;
    }
    amqp::fill(backend, (0..jobs).map(|_| noop_envelope(queue))).await?;
    let meter = Arc::new(Meter::default());
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let worker = tokio::spawn(
        Worker::new(
            Metered::new(Arc::clone(backend), meter.clone()),
            plugins,
            WorkerConfig::default(),
        )
        .run(shutdown.clone()),
    );
    let drained = meter.wait_for_acks(jobs as u64, DEADLINE).await;
    let elapsed = start.elapsed();
    shutdown.cancel();
    worker.await?;
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
