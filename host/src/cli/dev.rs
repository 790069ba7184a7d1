//! `jobhost dev`: build every plugin, run the host, and rebuild a plugin when its sources
//! change. The rebuilt component is renamed into the plugin directory, where the host's
//! own watch loads it: no restart. A failed build leaves the running version serving.
//!
//! What is watched, and why:
//! - the plugin directory itself and each directory in it, not recursively: a plugin that
//!   appears (its `Cargo.toml`, `package.json` or `pyproject.toml` is written) is built
//!   and watched from then on, and a manifest replaced by an editor's write-and-rename is
//!   still seen, which a watch on the file itself would lose with the old inode;
//! - each plugin's `src/`, recursively, so an edit in place and a rename over a file
//!   (`sed -i`, most editors' safe write) both count, but not Python's `__pycache__/`.
//!   Rust, JavaScript and Python plugins are watched alike (see [`build`](super::build)
//!   for how each is built).
//!
//! Every path is compared in canonical form, because that is how the watcher reports
//! them, while `--plugins` (default `plugins`) is usually relative.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use jobhost::reload::is_edit;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::HostArgs;
use super::build::{self, PluginSource};
use super::host;

/// How long sources must be quiet before a rebuild, so that saving several files (or an
/// editor's write-and-rename) costs one build.
const QUIET_PERIOD: Duration = Duration::from_millis(300);

/// `jobhost dev`.
pub(super) async fn run(args: HostArgs) -> anyhow::Result<()> {
    let dir = args.plugins.dir.clone();
    let crates = build::discover(&dir).await?;
    build::ensure_toolchains(&crates).await?;
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

/// What a changed path asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Work {
    /// An entry of the plugin directory came, went or was renamed: look for crates.
    Rescan,
    /// The sources of the crate in this (canonical) directory changed: rebuild it.
    Rebuild(PathBuf),
}

/// The plugin crates of the plugin directory and the watches on their sources.
struct Sources {
    /// The plugin directory as given, where components are dropped.
    dir: PathBuf,
    /// The plugin directory, canonical.
    root: PathBuf,
    /// Every known crate, by its canonical directory.
    crates: HashMap<PathBuf, PluginSource>,
    /// The directories of the plugin directory watched so far (canonical).
    watched: HashSet<PathBuf>,
    watcher: RecommendedWatcher,
}

impl Sources {
    /// Watch `dir`, its directories and the sources of `crates`.
    fn watch(
        dir: PathBuf,
        crates: Vec<PluginSource>,
        watcher: RecommendedWatcher,
    ) -> anyhow::Result<Self> {
        let root = std::fs::canonicalize(&dir)
            .with_context(|| format!("cannot resolve `{}`", dir.display()))?;
        let mut sources = Self {
            dir,
            root,
            crates: HashMap::new(),
            watched: HashSet::new(),
            watcher,
        };
        sources
            .watcher
            .watch(&sources.root, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch `{}`", sources.root.display()))?;
        sources.watch_directories()?;
        for plugin in crates {
            sources.add(plugin)?;
        }
        Ok(sources)
    }

    /// What a change of `path` asks for: only a plugin's `src/` and manifest, and the
    /// plugin directory's own entries, matter (not `target/`, `node_modules/`, components
    /// or the cache).
    fn work_for(&self, path: &Path) -> Option<Work> {
        let mut parts = path.strip_prefix(&self.root).ok()?.components();
        let Some(Component::Normal(entry)) = parts.next() else {
            return None;
        };
        let Some(Component::Normal(inside)) = parts.next() else {
            return Some(Work::Rescan);
        };
        if inside != "src" && !build::PLUGIN_MANIFESTS.iter().any(|file| inside == *file) {
            return None;
        }
        // Python writes compiled modules beside the sources when a test imports them: not
        // an edit.
        if parts.any(|part| part.as_os_str() == "__pycache__") {
            return None;
        }
        let crate_dir = self.root.join(entry);
        if self.crates.contains_key(&crate_dir) {
            Some(Work::Rebuild(crate_dir))
        } else {
            // A manifest being written into a new directory: perhaps a new plugin.
            Some(Work::Rescan)
        }
    }

    /// Watch the directories of the plugin directory not watched yet, so a manifest
    /// written into one later is seen.
    fn watch_directories(&mut self) -> anyhow::Result<()> {
        let entries = std::fs::read_dir(&self.root)
            .with_context(|| format!("cannot read `{}`", self.root.display()))?;
        for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
            if path.is_dir() && !self.watched.contains(&path) {
                self.watcher.watch(&path, RecursiveMode::NonRecursive)?;
                self.watched.insert(path);
            }
        }
        // The watches of removed directories went with them.
        self.watched.retain(|path| path.is_dir());
        Ok(())
    }

    /// Look for crates that appeared or disappeared; returns the keys of new crates,
    /// which are watched from now on and need a first build.
    async fn rescan(&mut self) -> anyhow::Result<Vec<PathBuf>> {
        self.watch_directories()?;
        self.crates.retain(|dir, _| build::is_plugin_dir(dir));
        let mut added = Vec::new();
        for dir in self.watched.clone() {
            if self.crates.contains_key(&dir) || !build::is_plugin_dir(&dir) {
                continue;
            }
            let Some(name) = dir.file_name() else {
                continue;
            };
            match build::describe(&self.dir.join(name)).await {
                Ok(plugin) => {
                    info!(plugin = %plugin.name, "new plugin crate; building and watching it");
                    added.push(self.add(plugin)?);
                }
                // Perhaps half-written; its next change rescans again.
                Err(err) => warn!(error = format!("{err:#}"), "cannot read a new plugin crate"),
            }
        }
        Ok(added)
    }

    /// Watch `plugin`'s `src/` and remember it; returns its key.
    fn add(&mut self, plugin: PluginSource) -> anyhow::Result<PathBuf> {
        let key = std::fs::canonicalize(&plugin.dir)
            .with_context(|| format!("cannot resolve `{}`", plugin.dir.display()))?;
        let src = key.join("src");
        self.watcher
            .watch(&src, RecursiveMode::Recursive)
            .with_context(|| format!("cannot watch `{}`", src.display()))?;
        self.crates.insert(key.clone(), plugin);
        Ok(key)
    }
}

/// Watch the plugin directory until `shutdown`, rebuilding a crate whose sources changed
/// once they have been quiet for [`QUIET_PERIOD`], and building crates that appear.
async fn rebuild_on_change(
    dir: PathBuf,
    crates: Vec<PluginSource>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PathBuf>();
    let watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if is_edit(&event.kind) => {
                for path in event.paths {
                    // The receiver is gone only after shutdown, when changes no longer matter.
                    let _ = tx.send(path);
                }
            }
            Ok(_) => {}
            Err(err) => warn!(error = %err, "source watch error"),
        })?;
    let mut sources = Sources::watch(dir, crates, watcher)?;
    info!(
        crates = sources.crates.len(),
        "watching plugin sources; an edit rebuilds its plugin, a new crate is built"
    );
    let mut due: HashMap<Work, Instant> = HashMap::new();
    loop {
        let next = due.values().min().copied();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            Some(path) = rx.recv() => {
                if let Some(work) = sources.work_for(&path) {
                    due.insert(work, Instant::now() + QUIET_PERIOD);
                }
            }
            () = sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let ready: Vec<Work> = due.iter().filter(|(_, at)| **at <= now).map(|(w, _)| w.clone()).collect();
                for work in ready {
                    due.remove(&work);
                    match work {
                        Work::Rescan => match sources.rescan().await {
                            Ok(added) => due.extend(added.into_iter().map(|key| (Work::Rebuild(key), now))),
                            Err(err) => warn!(error = format!("{err:#}"), "cannot look for new plugin crates"),
                        },
                        Work::Rebuild(key) => {
                            let Some(plugin) = sources.crates.get(&key) else { continue };
                            tokio::select! {
                                () = shutdown.cancelled() => return Ok(()),
                                () = rebuild(&sources.dir, plugin) => {}
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn rebuild(dir: &Path, plugin: &PluginSource) {
    info!(plugin = %plugin.name, "sources changed; rebuilding");
    if build::build(dir, plugin).await.is_err() {
        warn!(plugin = %plugin.name, "the running version keeps serving until the build succeeds");
    }
}
