//! Resources: resident memory of a fresh process idle with the example plugins loaded and
//! at 64 in-flight jobs, and the start time of an engine loading 10 plugins with a cold
//! and a warm compile cache.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobhost::broker::{Backend, MemoryBackend};
use jobhost::envelope::Envelope;
use jobhost::plugin::EngineConfig;
use jobhost::reload::Loader;
use jobhost::worker::{Plugins, Worker, WorkerConfig};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::Sizes;
use crate::report::{Report, Row, Samples};
use crate::units::{engine, load_fixture, plugin_unit, single_job};

/// The example plugins a host runs out of the box.
const EXAMPLES: [&str; 4] = ["email-sender", "thumbnailer", "rate-limited-api", "webhook"];

/// Ten plugins without conflicting job types, for the start time.
const TEN: [&str; 10] = [
    "email-sender",
    "thumbnailer",
    "rate-limited-api",
    "noop",
    "spin",
    "membomb",
    "recursion",
    "panic",
    "sandbox",
    "logspam",
];

/// Jobs kept running for the in-flight measurement: the worker's default concurrency.
const IN_FLIGHT: usize = 64;

/// What the probe process reports, in KiB.
#[derive(Debug, Serialize, Deserialize)]
struct Rss {
    baseline_kib: u64,
    idle_kib: u64,
    in_flight_kib: u64,
}

/// Starts are measured `sizes.starts` times per cache state; the table shows their median
/// and maximum.
pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let exe = std::env::current_exe()?;
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe).arg("rss-probe").output()
    })
    .await?
    .context("running the RSS probe")?;
    anyhow::ensure!(
        output.status.success(),
        "the RSS probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rss: Rss = serde_json::from_slice(&output.stdout).context("reading the RSS probe")?;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);

    let cache = tempfile::tempdir()?;
    let dir = tempfile::tempdir()?;
    for name in TEN {
        std::fs::copy(
            jobhost_fixtures::wasm(name),
            dir.path().join(format!("{name}.wasm")),
        )?;
    }
    let mut cold = Vec::with_capacity(sizes.starts);
    let mut warm = Vec::with_capacity(sizes.starts);
    for _ in 0..sizes.starts {
        // An empty cache for each cold start; the warm starts read what the last one wrote.
        let _ = std::fs::remove_dir_all(cache.path());
        cold.push(start(cache.path(), dir.path()).await?);
        warm.push(start(cache.path(), dir.path()).await?);
    }
    Ok(Report {
        rows: vec![
            Row::new(
                "start: engine + 10 plugins, cold cache",
                None,
                Samples::new(cold),
            )
            .tail(1.0),
            Row::new(
                "start: engine + 10 plugins, warm cache",
                None,
                Samples::new(warm),
            )
            .tail(1.0),
        ],
        details: vec![format!(
            "rss (fresh process): {} at start, {} idle with {} loaded and a worker on the memory backend, {} at {IN_FLIGHT} in-flight jobs (`spin`)",
            mib(rss.baseline_kib),
            mib(rss.idle_kib),
            EXAMPLES.join(", "),
            mib(rss.in_flight_kib),
        )],
    })
}

/// Create an engine caching into `cache` and load every plugin in `dir`.
async fn start(cache: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let engine = engine(EngineConfig {
        cache_dir: Some(cache.to_owned()),
        ..EngineConfig::default()
    })?;
    let loaded = Loader::new(engine, Plugins::new()).load_dir(dir).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        loaded == TEN.len(),
        "only {loaded} of {} plugins loaded",
        TEN.len()
    );
    Ok(elapsed)
}

/// The probe process: measure, print the JSON, exit without waiting for the spinning jobs.
pub(crate) async fn probe() -> anyhow::Result<()> {
    let baseline_kib = rss_kib()?;
    // Defaults but for one more pool slot: the engine keeps one for loads, and all 64 jobs
    // the worker lets in should hold an instance.
    let engine = engine(EngineConfig {
        max_instances: IN_FLIGHT as u32 + 1,
        ..EngineConfig::default()
    })?;
    let plugins = Plugins::new();
    let loader = Loader::new(engine.clone(), plugins.clone());
    for name in EXAMPLES {
        loader.sync(&jobhost_fixtures::wasm(name)).await?;
    }
    let backend = MemoryBackend::new();
    for queue in plugins.current().queues() {
        backend.declare(queue).await?;
    }
    let config = WorkerConfig {
        concurrency: IN_FLIGHT,
        ..WorkerConfig::default()
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(Worker::new(backend.clone(), plugins.clone(), config).run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_kib = rss_kib()?;

    // A queue whose prefetch lets the whole worker concurrency in.
    let spin = load_fixture(&engine, "spin").await?;
    let manifest = single_job(
        spin.manifest(),
        "spin.Spin",
        "bench.spin",
        Some(IN_FLIGHT as u16),
    );
    plugins.install(plugin_unit(&spin, manifest))?;
    let queue = plugins
        .current()
        .route("spin.Spin")
        .map(|route| route.queue.clone())
        .expect("spin was just installed");
    backend.declare(&queue).await?;
    for _ in 0..IN_FLIGHT {
        let payload = RawValue::from_string("{}".to_owned()).expect("JSON");
        backend
            .publish(&Envelope::new("spin.Spin", &queue.name, payload), None)
            .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while backend.unacked(&queue.name) < IN_FLIGHT {
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {IN_FLIGHT} spin jobs started",
            backend.unacked(&queue.name)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let every instance that has a pool slot start spinning.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let in_flight_kib = rss_kib()?;
    let rss = Rss {
        baseline_kib,
        idle_kib,
        in_flight_kib,
    };
    println!("{}", serde_json::to_string(&rss)?);
    std::process::exit(0);
}

/// This process's resident set, from `/proc/self/status`.
fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}
