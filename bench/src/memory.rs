//! The sandbox's cost and the worker's: the no-op plugin through the worker on the memory
//! backend, against the same no-op as a native handler through the same worker, and
//! against bare `Plugin::invoke` calls in a loop (the wasm floor).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobhost::broker::{Backend, MemoryBackend};
use jobhost::envelope::Envelope;
use jobhost::job::{Invocation, Outcome};
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::trace::JobTrace;
use jobhost::worker::{Plugins, Unit, Worker, WorkerConfig};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::Sizes;
use crate::metered::{Meter, Metered};
use crate::report::{Report, Row, Samples, Target};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, plugin_unit};

/// How long a memory-backend run may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(300);

/// The worker's per-job time with a wasm handler may be at most twice the floor's.
const FLOOR_TARGET: Target = Target::RatioAtLeast(0.5);

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let engine = engine(EngineConfig::default())?;
    let plugin = load_fixture(&engine, "noop").await?;
    let manifest = plugin.manifest().clone();
    let jobs = sizes.memory_jobs;

    // Warm the pool's slots and the allocator before anything is timed.
    through_worker(plugin_unit(&plugin, manifest.clone()), jobs / 10).await?;
    let native = through_worker(native_noop(manifest.clone()), jobs).await?;
    let wasm = through_worker(plugin_unit(&plugin, manifest), jobs).await?;
    let floor_1 = floor(&plugin, 1, jobs).await?;
    let floor_2 = floor(&plugin, 2, jobs).await?;

    let native = Row::new("memory: worker + native no-op", Some(native.0), native.1);
    let floor_1 = Row::new("floor: Plugin::invoke, 1 task", Some(floor_1.0), floor_1.1);
    let floor_2 = Row::new("floor: Plugin::invoke, 2 tasks", Some(floor_2.0), floor_2.1);
    let wasm = Row::new("memory: worker + wasm no-op", Some(wasm.0), wasm.1);
    let rows = vec![
        native.clone(),
        floor_1,
        floor_2.clone(),
        wasm.clone().against(&native, None),
        wasm.against(&floor_2, Some(FLOOR_TARGET)),
    ];
    Ok(Report {
        rows,
        details: Vec::new(),
    })
}

/// Run `jobs` pre-published no-op jobs through a worker serving `unit` on a fresh memory
/// backend: jobs/s from the worker's start to the last ack, and pull-to-ack latencies.
async fn through_worker(unit: Unit, jobs: usize) -> anyhow::Result<(f64, Samples)> {
    let backend = Arc::new(MemoryBackend::new());
    let meter = Arc::new(Meter::default());
    let plugins = Plugins::new();
    plugins.install(unit)?;
    let registry = plugins.current();
    let queue = registry
        .route(NOOP_JOB)
        .map(|route| route.queue.clone())
        .ok_or_else(|| anyhow::anyhow!("no unit serves `{NOOP_JOB}`"))?;
    backend.declare(&queue).await?;
    for _ in 0..jobs {
        backend.publish(&noop_envelope(&queue.name), None).await?;
    }
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let worker = tokio::spawn(
        Worker::new(
            Metered::new(backend, meter.clone()),
            plugins,
            WorkerConfig::default(),
        )
        .run(shutdown.clone()),
    );
    meter.wait_for_acks(jobs as u64, DEADLINE).await?;
    let elapsed = start.elapsed();
    shutdown.cancel();
    worker.await?;
    Ok((rate(jobs, elapsed), meter.samples()))
}

/// `jobs` calls of the no-op's handler in fresh instances, split over `tasks` tasks.
async fn floor(plugin: &Plugin, tasks: usize, jobs: usize) -> anyhow::Result<(f64, Samples)> {
    let start = Instant::now();
    let mut running = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let plugin = plugin.clone();
        let share = jobs / tasks;
        running.push(tokio::spawn(
            async move { invoke_loop(&plugin, share).await },
        ));
    }
    let mut latencies = Vec::with_capacity(jobs);
    for task in running {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed();
    Ok((rate(latencies.len(), elapsed), Samples::new(latencies)))
}

async fn invoke_loop(plugin: &Plugin, jobs: usize) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let start = Instant::now();
        invoke_noop(plugin).await?;
        latencies.push(start.elapsed());
    }
    Ok(latencies)
}

/// One call of the no-op's handler in a fresh instance, which must complete.
pub(crate) async fn invoke_noop(plugin: &Plugin) -> anyhow::Result<()> {
    let job = Invocation {
        job_id: Uuid::new_v4(),
        job_type: NOOP_JOB,
        queue: "test.noop",
        attempt: 1,
        max_attempts: 1,
        deferrals: 0,
        priority: 0,
        age: Duration::ZERO,
        payload: b"{}",
        batch: None,
        trace: JobTrace::start(None),
        timeout: Duration::from_secs(60),
        record: None,
    };
    let outcome = plugin.invoke(job).await;
    anyhow::ensure!(
        matches!(outcome, Outcome::Completed { .. }),
        "the no-op must complete, got {outcome:?}"
    );
    Ok(())
}

/// A first attempt of the no-op on `queue`.
pub(crate) fn noop_envelope(queue: &str) -> Envelope {
    let payload = RawValue::from_string("{}".to_owned()).expect("`{}` is JSON");
    Envelope::new(NOOP_JOB, queue, payload)
}

/// Jobs per second.
pub(crate) fn rate(jobs: usize, elapsed: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let jobs = jobs as f64;
    jobs / elapsed.as_secs_f64()
}
