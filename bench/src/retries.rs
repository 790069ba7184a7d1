//! Retries on RabbitMQ: pre-published jobs that fail once and succeed on their second
//! attempt after a 1 s wait, through the host (the scripted plugin's `scripted.SendEmail`,
//! whose queue waits 1 s before the first retry) and through `queuey` 1.x (a native
//! handler on a queue with a fixed 1 s backoff), beside raw lapin doing nothing but the
//! retry (each first delivery published to the hold queue, confirmed, then acked): what
//! the broker allows a client at that prefetch. Measured: time to drain, the peak of
//! messages waiting in the hold queue, and retry publishes per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::envelope::Envelope;
use jobhost::plugin::EngineConfig;
use jobhost::worker::{Plugins, WorkerConfig};
use lapin::Connection;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::Sizes;
use crate::amqp::{self, DrainingWorker, queue_name};
use crate::peer::{self, PeerQueues, Tally};
use crate::report::{Report, Row, Samples, Target};
use crate::units::{engine, load_fixture, plugin_unit, single_job};

/// The scripted job whose queue retries after 1 s, then 2 s.
const JOB: &str = "scripted.SendEmail";

/// How long draining may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(600);

/// The prefetch of the informational run that shows what more jobs in flight would buy:
/// the worker's default concurrency, less the engine slot kept for loads.
const WIDE_PREFETCH: u16 = 63;

/// How often the hold queue's depth is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What one side of the scenario measured.
struct Drained {
    elapsed: Duration,
    peak_held: u32,
    retry_publishes_per_s: Option<f64>,
    samples: Samples,
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.retry_jobs;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let backend = amqp::jobhost_backend(url).await?;

    let ours = {
        let queue = queue_name("host-retry");
        let measured = through_host(&connection, &backend, &queue, None, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let wide = {
        let queue = queue_name("host-retry-wide");
        let prefetch = Some(WIDE_PREFETCH);
        let measured = through_host(&connection, &backend, &queue, prefetch, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let raw = {
        let queue = queue_name("raw-retry");
        let measured = through_raw(&connection, &backend, &queue, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    let theirs = {
        peer::name_queues(&queue_name("queuey"), &queue_name("queuey-retry"));
        let queue = queue_name("queuey-retry");
        let measured = through_queuey(url, &connection, &backend, &queue, jobs).await;
        amqp::delete(&connection, &queue).await?;
        measured?
    };
    backend.close().await;

    // Each ratio is a rate over a rate, so the reference's drain time over this row's.
    let row = |scenario: &str, drained: &Drained| {
        Row::new(
            scenario,
            Some(crate::memory::rate(jobs, drained.elapsed)),
            drained.samples.clone(),
        )
    };
    let queuey = row("retries: queuey 1.x, fail once", &theirs);
    let raw_row = row(
        "retries: raw lapin, publish + confirm + ack, fail once",
        &raw,
    )
    .against(&queuey, None);
    let host = row("retries: jobhost + wasm, fail once", &ours);
    let host_to_ceiling = host.clone().against(&raw_row, None);
    let host = host.against(&queuey, Some(Target::RatioAtLeast(4.0)));
    let wide_row = row(
        &format!("retries: jobhost + wasm, fail once, prefetch {WIDE_PREFETCH}"),
        &wide,
    )
    .against(&queuey, None);
    let detail = |who: &str, drained: &Drained| {
        format!(
            "retries ({who}): {jobs} jobs drained in {:.2} s; peak {} messages in the 1 s hold queue; {} retry publishes/s",
            drained.elapsed.as_secs_f64(),
            drained.peak_held,
            drained
                .retry_publishes_per_s
                .map_or("-".to_owned(), |rate| format!("{rate:.0}")),
        )
    };
    Ok(Report {
        rows: vec![queuey, raw_row, host, host_to_ceiling, wide_row],
        details: vec![
            detail("jobhost", &ours),
            detail(&format!("jobhost, prefetch {WIDE_PREFETCH}"), &wide),
            detail("raw lapin, prefetch 16", &raw),
            detail("queuey", &theirs),
            "retries: a ratio is the reference's drain time over the row's; jobs/s counts jobs, not deliveries (each job is delivered twice); raw lapin publishes each first delivery to the hold queue and acks it once confirmed, with the prefetch (16) and topology of the others".to_owned(),
        ],
    })
}

fn flaky_envelope(queue: &str) -> Envelope {
    let payload = RawValue::from_string(r#"{"key":"bench","fail_times":1}"#.to_owned())
        .expect("the script is JSON");
    Envelope::new(JOB, queue, payload)
}

async fn through_host(
    connection: &Connection,
    backend: &Arc<RabbitMqBackend>,
    queue: &str,
    prefetch: Option<u16>,
    jobs: usize,
) -> anyhow::Result<Drained> {
    let engine = engine(EngineConfig::default())?;
    let plugin = load_fixture(&engine, "scripted").await?;
    let plugins = Plugins::new();
    plugins.install(plugin_unit(
        &plugin,
        single_job(plugin.manifest(), JOB, queue, prefetch),
    ))?;
    let running = DrainingWorker::start(
        backend,
        plugins,
        (0..jobs).map(|_| flaky_envelope(queue)),
        WorkerConfig::default(),
    )
    .await?;
    // Each job is acked twice: once when its retry is published, once when it succeeds.
    let drained = running.meter.wait_for_acks(2 * jobs as u64, DEADLINE);
    let (drained, peak_held) = with_peak(connection, queue, drained).await;
    let elapsed = running.started.elapsed();
    let meter = running.meter.clone();
    running.stop().await?;
    drained?;
    Ok(Drained {
        elapsed,
        peak_held: peak_held?,
        retry_publishes_per_s: meter.delayed_publish_rate(),
        samples: meter.samples(),
    })
}

async fn through_queuey(
    url: &str,
    connection: &Connection,
    backend: &Arc<RabbitMqBackend>,
    queue: &str,
    jobs: usize,
) -> anyhow::Result<Drained> {
    // The shape `queuey` declares too: prefetch 16, durable, 10 priorities.
    backend
        .declare(&jobhost_sdk::QueueConfig::new(queue))
        .await?;
    amqp::fill(backend, (0..jobs).map(|_| flaky_envelope(queue))).await?;
    let tally = Arc::new(Tally::default());
    let connected = peer::connect(url).await?;
    let start = Instant::now();
    let running = peer::Running::start(connected, PeerQueues::Flaky, tally.clone()).await?;
    let drained = peer::wait_for(&tally, jobs as u64, DEADLINE);
    let (drained, peak_held) = with_peak(connection, queue, drained).await;
    let elapsed = start.elapsed();
    running.stop().await?;
    drained?;
    Ok(Drained {
        elapsed,
        peak_held: peak_held?,
        retry_publishes_per_s: tally.failure_rate(),
        samples: Samples::default(),
    })
}

/// Raw lapin: the jobs drained by [`amqp::retry_once_and_ack`] at the prefetch queuey and
/// the host use (16), through the same work and hold queues.
async fn through_raw(
    connection: &Connection,
    backend: &Arc<RabbitMqBackend>,
    queue: &str,
    jobs: usize,
) -> anyhow::Result<Drained> {
    let config = jobhost_sdk::QueueConfig::new(queue);
    backend.declare(&config).await?;
    let hold = amqp::one_second_hold(queue)?;
    amqp::declare_hold(connection, queue, &hold).await?;
    amqp::fill(backend, (0..jobs).map(|_| flaky_envelope(queue))).await?;
    let start = Instant::now();
    let drained = amqp::retry_once_and_ack(connection, queue, &hold.name, config.prefetch, jobs);
    let (drained, peak_held) = with_peak(connection, queue, drained).await;
    let elapsed = start.elapsed();
    Ok(Drained {
        elapsed,
        peak_held: peak_held?,
        retry_publishes_per_s: drained?,
        samples: Samples::default(),
    })
}

/// Run `until` while sampling the depth of `queue`'s 1 s hold queue; its result and the
/// deepest sample.
async fn with_peak<T>(
    connection: &Connection,
    queue: &str,
    until: impl Future<Output = T>,
) -> (T, anyhow::Result<u32>) {
    let hold = match amqp::one_second_hold(queue) {
        Ok(hold) => hold.name,
        Err(err) => return (until.await, Err(err)),
    };
    let done = CancellationToken::new();
    let sample = async {
        let mut peak = 0;
        while !done.is_cancelled() {
            peak = peak.max(amqp::depth(connection, &hold).await?.unwrap_or(0));
            tokio::select! {
                () = done.cancelled() => {},
                () = tokio::time::sleep(SAMPLE_EVERY) => {},
            }
        }
        Ok(peak)
    };
    let finish = async {
        let result = until.await;
        done.cancel();
        result
    };
    tokio::join!(finish, sample)
}
