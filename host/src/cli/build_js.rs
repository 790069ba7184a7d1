//! Building a JavaScript plugin: a directory with a `package.json` (and no `Cargo.toml`),
//! as `jobhost new --lang js` makes it.
//!
//! 1. `npm install` in the plugin's directory when its `node_modules` is missing or older
//!    than its `package.json` or lockfile: the plugin pins its own build tools
//!    (componentize-js and esbuild, exact versions in its `devDependencies`), so nothing
//!    is installed globally and two plugins may pin different versions.
//! 2. The WIT this binary speaks is written to `.jobhost/wit/`, so the component is built
//!    against the contract of the host that loads it.
//! 3. `node node_modules/@jobhost/sdk/src/build.js` checks the plugin's declarations in
//!    Node (a bad retry policy fails here, with the SDK's message), bundles it and runs
//!    componentize-js; the component lands in `.jobhost/`, for [`super::build`] to swap in.
//!
//! Every step's output goes to stderr as it comes; a missing `node` or `npm` is an error
//! naming what to install.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::SystemTime;

use anyhow::{Context, bail};
use serde::Deserialize;
use tokio::process::Command;
use tracing::info;

use super::build::PluginSource;

/// The file that makes a directory a JavaScript plugin.
pub(super) const PACKAGE_JSON: &str = "package.json";

/// The build's scratch directory inside the plugin (the scaffold's `.gitignore` lists it).
const SCRATCH: &str = ".jobhost";

/// The contract the component is built against: the host's own.
const WIT: &str = include_str!("../../../wit/jobhost.wit");

/// The SDK's build script, as `npm install` places it in the plugin.
const BUILD_SCRIPT: &str = "node_modules/@jobhost/sdk/src/build.js";

#[derive(Debug, Deserialize)]
struct Package {
    name: Option<String>,
}

/// The `name` of the plugin's `package.json`, which names its component.
pub(super) fn package_name(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(PACKAGE_JSON);
    let text = std::fs::read(&path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let package: Package = serde_json::from_slice(&text)
        .with_context(|| format!("`{}` is not a package.json npm can read", path.display()))?;
    match package.name {
        Some(name) if !name.is_empty() && !name.contains(['/', '\\']) => Ok(name),
        _ => bail!(
            "`{}` needs a `name` without a scope or `/` (it names the component)",
            path.display()
        ),
    }
}

/// Build the JavaScript plugin; returns where its component was written.
pub(super) async fn build(plugin: &PluginSource) -> anyhow::Result<PathBuf> {
    // Absolute, because the script runs in the plugin's directory and is given paths in it.
    let dir = std::fs::canonicalize(&plugin.dir)
        .with_context(|| format!("cannot resolve `{}`", plugin.dir.display()))?;
    install(&dir).await?;
    let scratch = dir.join(SCRATCH);
    let wit = scratch.join("wit");
    std::fs::create_dir_all(&wit).with_context(|| format!("cannot create `{}`", wit.display()))?;
    std::fs::write(wit.join("jobhost.wit"), WIT)
        .with_context(|| format!("cannot write the WIT into `{}`", wit.display()))?;
    let out = scratch.join(plugin.wasm_name());
    info!(plugin = %plugin.name, "building: node {BUILD_SCRIPT} (componentize-js)");
    let status = tool("node")
        .arg(BUILD_SCRIPT)
        .arg("--wit")
        .arg(&wit)
        .arg("--out")
        .arg(&out)
        .current_dir(&dir)
        .status()
        .await
        .context(
            "cannot run `node`: JavaScript plugins need Node.js 20 or later on PATH \
             (https://nodejs.org)",
        )?;
    if !status.success() {
        bail!("the build script failed ({status}); its errors are above",);
    }
    Ok(out)
}

/// `npm install` in `dir`, unless its `node_modules` is newer than what it installs from.
pub(super) async fn install(dir: &Path) -> anyhow::Result<()> {
    if installed(dir) {
        return Ok(());
    }
    info!(dir = %dir.display(), "installing the plugin's packages: npm install");
    let status = tool("npm")
        .args(["install", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .status()
        .await
        .context(
            "cannot run `npm`: JavaScript plugins need Node.js 20 or later and npm on PATH \
             (https://nodejs.org)",
        )?;
    if !status.success() {
        bail!(
            "`npm install` in `{}` failed ({status}); its errors are above",
            dir.display()
        );
    }
    Ok(())
}

/// Whether npm's record of the last install (`node_modules/.package-lock.json`) is newer
/// than `package.json` and `package-lock.json`.
fn installed(dir: &Path) -> bool {
    let modified = |path: PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(install) = modified(dir.join("node_modules/.package-lock.json")) else {
        return false;
    };
    ["package.json", "package-lock.json"]
        .into_iter()
        .filter_map(|file| modified(dir.join(file)))
        .all(|source: SystemTime| source <= install)
}

/// `program` with its output going where `jobhost`'s does, killed if the build is dropped
/// (`jobhost dev` shutting down).
fn tool(program: &str) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_package_json_names_its_plugin_and_a_scoped_or_missing_name_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write =
            |text: &str| std::fs::write(dir.path().join(PACKAGE_JSON), text).expect("writes");
        write(r#"{"name": "greeter-js", "type": "module"}"#);
        assert_eq!(package_name(dir.path()).expect("a name"), "greeter-js");
        for bad in [
            r#"{"name": "@acme/greeter"}"#,
            r#"{"type": "module"}"#,
            "not json",
        ] {
            write(bad);
            assert!(package_name(dir.path()).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn packages_are_installed_again_only_when_package_json_is_newer_than_the_install() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let touch = |path: &Path, age: u64| {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            let file = std::fs::File::create(path).expect("creates");
            file.set_modified(SystemTime::now() - Duration::from_secs(age))
                .expect("sets its time");
        };
        let manifest = dir.path().join(PACKAGE_JSON);
        let record = dir.path().join("node_modules/.package-lock.json");
        touch(&manifest, 100);
        assert!(!installed(dir.path()), "never installed");
        touch(&record, 50);
        assert!(installed(dir.path()), "installed after the last edit");
        touch(&manifest, 10);
        assert!(!installed(dir.path()), "package.json edited since");
    }
}
