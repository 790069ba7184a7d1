//! What the builds of guest-language plugins (JavaScript, Python) share: each plugin pins
//! its own build tools and installs them into its own directory (`node_modules/`,
//! `.venv/`), so nothing is installed globally and two plugins may pin different versions.
//!
//! - [`tool`]: a build tool's process, its output going where `jobhost`'s does.
//! - [`run_step`]: run one step, naming what to install when the tool is missing.
//! - [`installed_since`]: whether an install is newer than the files it installs from.
//! - [`write_wit`]: the contract this binary speaks, written into the plugin's scratch
//!   directory, so the component is built against the host that loads it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::SystemTime;

use anyhow::{Context, bail};
use tokio::process::Command;

/// The build's scratch directory inside the plugin (the scaffolds' `.gitignore` lists it).
pub(super) const SCRATCH: &str = ".jobhost";

/// The contract the component is built against: the host's own.
const WIT: &str = include_str!("../../../wit/jobhost.wit");

/// `program` with its output going where `jobhost`'s does, killed if the build is dropped
/// (`jobhost dev` shutting down).
pub(super) fn tool(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

/// Run `command` (described as `what`, e.g. "`npm install` in `plugins/x`") to its end.
/// When its program cannot be started, the error is `missing`, which says what to install.
pub(super) async fn run_step(
    command: &mut Command,
    what: &str,
    missing: &'static str,
) -> anyhow::Result<()> {
    let status = command.status().await.context(missing)?;
    if !status.success() {
        bail!("{what} failed ({status}); its errors are above");
    }
    Ok(())
}

/// Whether `record` (a file the last install wrote) exists and is newer than each of
/// `sources` that exists in `dir`.
pub(super) fn installed_since(dir: &Path, record: &str, sources: &[&str]) -> bool {
    let modified = |path: PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(install) = modified(dir.join(record)) else {
        return false;
    };
    sources
        .iter()
        .filter_map(|file| modified(dir.join(file)))
        .all(|source: SystemTime| source <= install)
}

/// Write the host's WIT into `dir`'s scratch directory; returns the WIT directory.
pub(super) fn write_wit(dir: &Path) -> anyhow::Result<PathBuf> {
    let wit = dir.join(SCRATCH).join("wit");
    std::fs::create_dir_all(&wit).with_context(|| format!("cannot create `{}`", wit.display()))?;
    std::fs::write(wit.join("jobhost.wit"), WIT)
        .with_context(|| format!("cannot write the WIT into `{}`", wit.display()))?;
    Ok(wit)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_install_is_fresh_only_while_no_source_is_newer_than_its_record() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let touch = |path: &str, age: u64| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            let file = std::fs::File::create(path).expect("creates");
            file.set_modified(SystemTime::now() - Duration::from_secs(age))
                .expect("sets its time");
        };
        let sources = ["package.json", "package-lock.json"];
        touch("package.json", 100);
        assert!(
            !installed_since(dir.path(), "node_modules/.record", &sources),
            "never installed"
        );
        touch("node_modules/.record", 50);
        assert!(
            installed_since(dir.path(), "node_modules/.record", &sources),
            "installed after the last edit, a missing source not counting"
        );
        touch("package.json", 10);
        assert!(
            !installed_since(dir.path(), "node_modules/.record", &sources),
            "a source edited since"
        );
    }
}
