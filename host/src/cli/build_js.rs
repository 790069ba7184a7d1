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

use anyhow::{Context, bail};
use serde::Deserialize;
use tracing::info;

use super::build::PluginSource;
use super::guest_toolchain::{SCRATCH, installed_since, run_step, tool, write_wit};

/// The file that makes a directory a JavaScript plugin.
pub(super) const PACKAGE_JSON: &str = "package.json";

/// The SDK's build script, as `npm install` places it in the plugin.
const BUILD_SCRIPT: &str = "node_modules/@jobhost/sdk/src/build.js";

/// npm's record of the last install, newer than `package.json` once it is installed.
const INSTALL_RECORD: &str = "node_modules/.package-lock.json";

const NO_NODE: &str =
    "cannot run `node`: JavaScript plugins need Node.js 20 or later on PATH (https://nodejs.org)";

const NO_NPM: &str = "cannot run `npm`: JavaScript plugins need Node.js 20 or later and npm on \
                      PATH (https://nodejs.org)";

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
    let wit = write_wit(&dir)?;
    let out = dir.join(SCRATCH).join(plugin.wasm_name());
    info!(plugin = %plugin.name, "building: node {BUILD_SCRIPT} (componentize-js)");
    run_step(
        tool("node")
            .arg(BUILD_SCRIPT)
            .arg("--wit")
            .arg(&wit)
            .arg("--out")
            .arg(&out)
            .current_dir(&dir),
        "the build script",
        NO_NODE,
    )
    .await?;
    Ok(out)
}

/// `npm install` in `dir`, unless its `node_modules` is newer than what it installs from.
pub(super) async fn install(dir: &Path) -> anyhow::Result<()> {
    if installed_since(dir, INSTALL_RECORD, &[PACKAGE_JSON, "package-lock.json"]) {
        return Ok(());
    }
    info!(dir = %dir.display(), "installing the plugin's packages: npm install");
    run_step(
        tool("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(dir),
        &format!("`npm install` in `{}`", dir.display()),
        NO_NPM,
    )
    .await
}

#[cfg(test)]
mod tests {
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
}
