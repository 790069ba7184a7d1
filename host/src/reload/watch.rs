//! Watching the plugin directory and the grants file, debounced per file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Loader, QUIET_PERIOD, is_plugin_file};

/// Whether `kind` changes a file's content or its presence. Loading a plugin reads its
/// file, and reads raise access events: counting them would load every plugin again and
/// again, and refuse a broken one in a loop, for ever.
pub fn is_edit(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(modify) => !matches!(modify, ModifyKind::Metadata(_)),
        // The end of a write, not a read.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        _ => false,
    }
}

/// Watch `dir` until `shutdown`, syncing each `*.wasm` that changed once it has been quiet
/// for [`QUIET_PERIOD`], or at once when it was renamed into place; and the loader's grants
/// file, wherever it is, reloading it the same way. Returns at `shutdown` even while a
/// load is running.
pub async fn watch(loader: Loader, dir: &Path, shutdown: CancellationToken) -> notify::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(PathBuf, Duration)>();
    let grants_file = loader.grants_file().map(canonical_file);
    let watched = Watched {
        dir: dir.to_owned(),
        grants_file: grants_file.clone(),
    };
    let _watcher = start_watching(watched, tx)?;
    // Said once every watch is in place, because whoever waits for this line (an operator,
    // a test) may change the grants file next.
    info!(dir = %dir.display(), "watching the plugin directory for changes");
    let mut due: HashMap<PathBuf, Instant> = HashMap::new();
    loop {
        let next = due.values().min().copied();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            Some((path, quiet)) = rx.recv() => {
                due.insert(path, Instant::now() + quiet);
            }
            () = sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let ready: Vec<PathBuf> = due.iter().filter(|(_, at)| **at <= now).map(|(p, _)| p.clone()).collect();
                for path in ready {
                    due.remove(&path);
                    let grants = grants_file.as_ref() == Some(&path);
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(()),
                        () = apply(&loader, path, grants) => {}
                    }
                }
            }
        }
    }
}

/// Watch `watched.dir`, and the grants file's directory when it is elsewhere, sending each
/// path that `watched` wants with how long it must stay quiet before it is read.
fn start_watching(
    watched: Watched,
    tx: mpsc::UnboundedSender<(PathBuf, Duration)>,
) -> notify::Result<notify::RecommendedWatcher> {
    let dir = watched.dir.clone();
    let grants_file = watched.grants_file.clone();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if is_edit(&event.kind) => {
                // A rename moves a whole file into place, so there is no partial copy to
                // wait out; this takes the quiet period off the recommended deploy.
                let quiet = match event.kind {
                    EventKind::Modify(ModifyKind::Name(_)) => Duration::ZERO,
                    _ => QUIET_PERIOD,
                };
                for path in event.paths.into_iter().filter(|p| watched.wants(p)) {
                    // The receiver is gone only after shutdown, when events no longer matter.
                    let _ = tx.send((path, quiet));
                }
            }
            Ok(_) => {}
            Err(err) => warn!(error = %err, "plugin directory watch error"),
        })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    // A grants file elsewhere is watched through its directory, so that replacing it (as
    // editors and deploys do) is seen too.
    // A directory that does not exist (the default configuration directory of a host
    // never given a grants file) is not fatal: the plugins are still watched.
    if let Some(parent) = grants_file.as_deref().and_then(Path::parent)
        && parent != dir
        && let Err(err) = watcher.watch(parent, RecursiveMode::NonRecursive)
    {
        warn!(dir = %parent.display(), error = %err, "cannot watch the grants file's directory: a grants file written there is read at the next start");
    }
    Ok(watcher)
}

/// Read the changed `path` again: the grants file when `grants`, else a plugin file. The
/// outcome is logged by the reload; a refusal leaves the old version, or the grants in
/// force, in place. Shutdown does not wait for a plugin load: an abandoned load ends by
/// itself at the engine's load deadline.
async fn apply(loader: &Loader, path: PathBuf, grants: bool) {
    if grants {
        // Off the runtime, since reading a file may block.
        let loader = loader.clone();
        let _ = tokio::task::spawn_blocking(move || loader.reload_grants()).await;
    } else {
        let _ = loader.sync(&path).await;
    }
}

/// Which changed paths matter: plugins in the plugin directory, and the grants file.
struct Watched {
    dir: PathBuf,
    grants_file: Option<PathBuf>,
}

impl Watched {
    fn wants(&self, path: &Path) -> bool {
        let plugin = is_plugin_file(path) && path.parent() == Some(self.dir.as_path());
        plugin || self.grants_file.as_deref() == Some(path)
    }
}

/// `file` with its directory made canonical, as the watcher reports paths; the file itself
/// may not exist yet.
fn canonical_file(file: &Path) -> PathBuf {
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_owned());
    match file.file_name() {
        Some(name) => parent.join(name),
        None => parent,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, MetadataKind, RenameMode};

    use super::*;

    #[test]
    fn reads_and_metadata_changes_are_not_edits_but_writes_renames_and_removals_are() {
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(
            !is_edit(&read),
            "a load reads the file; that must not load it again"
        );
        assert!(!is_edit(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_edit(&EventKind::Modify(ModifyKind::Metadata(
            MetadataKind::AccessTime
        ))));
        assert!(is_edit(&EventKind::Create(CreateKind::File)));
        assert!(is_edit(&EventKind::Modify(ModifyKind::Data(
            DataChange::Content
        ))));
        assert!(is_edit(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(is_edit(&EventKind::Remove(notify::event::RemoveKind::File)));
        assert!(is_edit(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
    }
}
