//! The handlers under test: fixture plugins, and the native no-op they are compared with.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use jobhost::job::{Manifest, Outcome};
use jobhost::plugin::{Engine, EngineConfig, Plugin};
use jobhost::testing::native_unit;
use jobhost::worker::Unit;

/// The no-op plugin's one job type.
pub(crate) const NOOP_JOB: &str = "noop.Noop";

/// Load fixture `name` with `engine`, off the async runtime as loading requires.
pub(crate) async fn load_fixture(engine: &Engine, name: &str) -> anyhow::Result<Plugin> {
    load_path(engine, jobhost_fixtures::wasm(name)).await
}

/// Load the plugin at `path` with `engine`, off the async runtime.
pub(crate) async fn load_path(engine: &Engine, path: PathBuf) -> anyhow::Result<Plugin> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || {
        engine
            .load(&path)
            .with_context(|| format!("loading {}", path.display()))
    })
    .await?
}

/// A default engine, as the host would build one.
pub(crate) fn engine(config: EngineConfig) -> anyhow::Result<Engine> {
    Engine::new(config).context("creating the engine")
}

/// `manifest` cut down to `job` alone, its queue renamed to `queue`, so each run on a
/// shared broker gets queues of its own; `prefetch` replaces the queue's own when given.
///
/// # Panics
/// When `manifest` has no job `job`: the fixtures are known.
pub(crate) fn single_job(
    manifest: &Manifest,
    job: &str,
    queue: &str,
    prefetch: Option<u16>,
) -> Manifest {
    let mut spec = manifest
        .job(job)
        .unwrap_or_else(|| panic!("plugin `{}` has no job `{job}`", manifest.name))
        .clone();
    let mut config = manifest
        .queues
        .iter()
        .find(|config| config.name == spec.queue)
        .expect("a validated manifest declares its jobs' queues")
        .clone();
    config.name = queue.to_owned();
    if let Some(prefetch) = prefetch {
        config.prefetch = prefetch;
    }
    spec.queue = queue.to_owned();
    Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: manifest.name.clone(),
        queues: vec![config],
        jobs: vec![spec],
    }
}

/// A unit running `plugin` under `manifest` instead of its own.
pub(crate) fn plugin_unit(plugin: &Plugin, manifest: Manifest) -> Unit {
    Unit::new(
        plugin.path().display().to_string(),
        plugin.version(),
        manifest,
        Arc::new(plugin.clone()),
    )
}

/// The no-op as a native handler with `manifest`: the same worker path without a sandbox.
pub(crate) fn native_noop(manifest: Manifest) -> Unit {
    native_unit("native-noop", manifest, |_| Outcome::Completed {
        follow_ups: Vec::new(),
    })
}
