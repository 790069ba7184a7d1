//! `jobhost dev`: build every plugin, run the host, and rebuild a plugin when its sources
//! change. The rebuilt component is renamed into the plugin directory, where the host's
//! own watch loads it: no restart. A failed build leaves the running version serving.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::HostArgs;
use super::build::{self, PluginCrate};
use super::host;

/// How long sources must be quiet before a rebuild, so that saving several files (or an
/// editor's write-and-rename) costs one build.
const QUIET_PERIOD: Duration = Duration::from_millis(300);

/// `jobhost dev`.
pub(super) async fn run(args: HostArgs) -> anyhow::Result<()> {
    let dir = args.plugins.dir.clone();
    let crates = build::discover(&dir).await?;
    build::ensure_wasm_target().await?;
    for plugin in &crates {
        // A failure is logged with cargo's errors; the host serves what did build.
        let _ = build::build(&dir, plugin).await;
    }
    let shutdown = CancellationToken::new();
    let watcher = tokio::spawn(rebuild_on_change(dir, crates, shutdown.clone()));
    let result = host::run_until_signal(&args, shutdown.clone()).await;
    shutdown.cancel();
    watcher.await.context("the source watcher failed")??;
    result
}

/// Watch each crate's `src/` and `Cargo.toml` until `shutdown`, rebuilding the crates
/// whose sources changed once they have been quiet for [`QUIET_PERIOD`].
async fn rebuild_on_change(
    dir: PathBuf,
    crates: Vec<PluginCrate>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PathBuf>();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) => {
                for path in event.paths {
                    // The receiver is gone only after shutdown, when changes no longer matter.
                    let _ = tx.send(path);
                }
            }
            Err(err) => warn!(error = %err, "source watch error"),
        })?;
    for plugin in &crates {
        let src = plugin.dir.join("src");
        watcher
            .watch(&src, RecursiveMode::Recursive)
            .with_context(|| format!("cannot watch `{}`", src.display()))?;
        watcher.watch(&plugin.dir.join("Cargo.toml"), RecursiveMode::NonRecursive)?;
    }
    info!(
        crates = crates.len(),
        "watching plugin sources; an edit rebuilds its plugin"
    );
    let mut due: HashMap<usize, Instant> = HashMap::new();
    loop {
        let next = due.values().min().copied();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            Some(path) = rx.recv() => {
                if let Some(index) = crates.iter().position(|c| path.starts_with(&c.dir)) {
                    due.insert(index, Instant::now() + QUIET_PERIOD);
                }
            }
            () = sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let ready: Vec<usize> = due.iter().filter(|(_, at)| **at <= now).map(|(i, _)| *i).collect();
                for index in ready {
                    due.remove(&index);
                    let plugin = &crates[index];
                    info!(plugin = %plugin.name, "sources changed; rebuilding");
                    let built = tokio::select! {
                        () = shutdown.cancelled() => return Ok(()),
                        built = build::build(&dir, plugin) => built,
                    };
                    if built.is_err() {
                        warn!(plugin = %plugin.name, "the running version keeps serving until the build succeeds");
                    }
                }
            }
        }
    }
}
