//! Hot reload: the time from an atomic rename of a new `.wasm` into the watched directory
//! to the first job served by it, alternating the `versioned` fixture's v1 and v2, with
//! the compile cache warm (both versions compiled before) and cold (no cache: every swap
//! compiles).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobhost::broker::{Backend, MemoryBackend};
use jobhost::envelope::Envelope;
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::reload::{Loader, watch};
use jobhost::worker::{Plugins, Worker, WorkerConfig};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::Sizes;
use crate::metered::{Meter, Metered};
use crate::report::{Report, Row, Samples, Target, millis};
use crate::units::{engine, load_fixture};

/// The target: a swap serves its first job within this, at the median.
const TARGET: Target = Target::P50Below(Duration::from_millis(250));

/// How long one swap may take before the scenario is called stuck.
const SWAP_DEADLINE: Duration = Duration::from_secs(30);

/// Time given to the watcher task to start watching before the first swap.
const WATCH_SETUP: Duration = Duration::from_millis(500);

const JOB: &str = "versioned.Echo";

/// The file the swaps rename into place.
const PLUGIN_FILE: &str = "versioned.wasm";

/// One version of the plugin: its bytes and the version the host will report.
struct Version {
    bytes: Vec<u8>,
    version: String,
}

impl Version {
    fn of(plugin: &Plugin) -> anyhow::Result<Self> {
        Ok(Self {
            bytes: std::fs::read(plugin.path())?,
            version: plugin.version().to_owned(),
        })
    }
}

/// One swap: rename to registry swap, rename to first job served.
struct Swap {
    installed: Duration,
    served: Duration,
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let cache = tempfile::tempdir()?;
    let warm_config = EngineConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..EngineConfig::default()
    };
    // Loading both versions once fills the cache the warm engine reads.
    let warming = engine(warm_config.clone())?;
    let versions = [
        Version::of(&load_fixture(&warming, "versioned").await?)?,
        Version::of(&load_fixture(&warming, "versioned-v2").await?)?,
    ];
    drop(warming);

    let mut report = Report::default();
    for (label, config) in [("warm", warm_config), ("cold", EngineConfig::default())] {
        let swaps = swaps(config, &versions, sizes.reload_swaps).await?;
        let installed = Samples::new(swaps.iter().map(|s| s.installed).collect());
        let served = Samples::new(swaps.iter().map(|s| s.served).collect());
        report.details.push(format!(
            "reload ({label} cache): rename to registry swap p50 {}, p95 {}",
            installed.quantile(0.5).map_or("-".into(), millis),
            installed.quantile(0.95).map_or("-".into(), millis),
        ));
        let row = Row::new(
            format!(
                "reload: rename to first job, {label} cache ({} swaps)",
                swaps.len()
            ),
            None,
            served,
        )
        .tail(0.95);
        report.rows.push(Row {
            target: Some(TARGET),
            ..row
        });
    }
    Ok(report)
}

/// Start a host (watcher, worker, memory backend) on a fresh directory, then swap the
/// plugin `count` times, v2 first.
async fn swaps(
    config: EngineConfig,
    versions: &[Version; 2],
    count: usize,
) -> anyhow::Result<Vec<Swap>> {
    let dir = tempfile::tempdir()?;
    let engine = engine(config)?;
    let plugins = Plugins::new();
    let loader = Loader::new(engine, plugins.clone());
    let backend = Arc::new(MemoryBackend::new());
    let meter = Arc::new(Meter::tracking_ids());
    let shutdown = CancellationToken::new();

    let target = dir.path().join(PLUGIN_FILE);
    rename_into(dir.path(), &target, &versions[0].bytes)?;
    loader.load_dir(dir.path()).await?;
    let queue = plugins
        .current()
        .route(JOB)
        .map(|route| route.queue.clone())
        .ok_or_else(|| anyhow::anyhow!("v1 did not load"))?;
    backend.declare(&queue).await?;
    let watcher = tokio::spawn({
        let (loader, dir, shutdown) = (loader.clone(), dir.path().to_owned(), shutdown.clone());
        async move { watch(loader, &dir, shutdown).await }
    });
    let worker = tokio::spawn(
        Worker::new(
            Metered::new(backend.clone(), meter.clone()),
            plugins.clone(),
            WorkerConfig::default(),
        )
        .run(shutdown.clone()),
    );

    // `watch` registers its watch inside the task; a rename before that would go unseen.
    tokio::time::sleep(WATCH_SETUP).await;
    let mut swaps = Vec::with_capacity(count);
    for i in 0..count {
        let next = &versions[(i + 1) % 2];
        let swap = swap(
            &plugins,
            &backend,
            &meter,
            dir.path(),
            &target,
            next,
            &queue.name,
        )
        .await;
        match swap {
            Ok(swap) => swaps.push(swap),
            Err(err) => {
                shutdown.cancel();
                return Err(err);
            }
        }
    }
    shutdown.cancel();
    worker.await?;
    watcher.await??;
    Ok(swaps)
}

async fn swap(
    plugins: &Plugins,
    backend: &MemoryBackend,
    meter: &Meter,
    dir: &Path,
    target: &Path,
    next: &Version,
    queue: &str,
) -> anyhow::Result<Swap> {
    let renamed = rename_into(dir, target, &next.bytes)?;
    while !serving(plugins, &next.version) {
        anyhow::ensure!(
            renamed.elapsed() < SWAP_DEADLINE,
            "version {} was not loaded within {SWAP_DEADLINE:?}",
            next.version
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let installed = renamed.elapsed();
    let payload = RawValue::from_string(r#"{"message":"probe"}"#.to_owned()).expect("JSON");
    let probe = Envelope::new(JOB, queue, payload);
    backend.publish(&probe, None).await?;
    let served = loop {
        if let Some(at) = meter.acked_at(probe.job_id) {
            break at.duration_since(renamed);
        }
        anyhow::ensure!(
            renamed.elapsed() < SWAP_DEADLINE,
            "the probe job was not served within {SWAP_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    Ok(Swap { installed, served })
}

fn serving(plugins: &Plugins, version: &str) -> bool {
    plugins
        .current()
        .units()
        .any(|unit| unit.version() == version)
}

/// Write `bytes` next to `target` and rename them onto it, as a deploy should; returns
/// the instant of the rename.
fn rename_into(dir: &Path, target: &Path, bytes: &[u8]) -> anyhow::Result<Instant> {
    let staging: PathBuf = dir.join("incoming.tmp");
    std::fs::write(&staging, bytes)?;
    std::fs::rename(&staging, target)?;
    Ok(Instant::now())
}
