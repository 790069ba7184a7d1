//! `jobhost build`: compile plugins into components and swap them into the plugin
//! directory atomically.
//!
//! A directory of the plugin directory is a plugin when it holds a `Cargo.toml` (a Rust
//! crate, compiled for `wasm32-wasip2` by cargo), else a `package.json` (a JavaScript
//! plugin, built by its own pinned componentize-js: see [`build_js`](super::build_js)), else
//! a `pyproject.toml` (a Python plugin, built by its own pinned componentize-py: see
//! [`build_py`](super::build_py)). All land as `{name with underscores}.wasm`, where a
//! running host loads them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Deserialize;
use tokio::process::Command;
use tracing::{error, info, warn};

use super::{build_js, build_py};

/// The target plugins are compiled for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// The release profile setting every plugin build gets: no debug info in the component.
///
/// Because the workspace's release profile keeps line tables for the host's backtraces
/// (and cargo profiles cannot differ by target), a plugin would otherwise carry the
/// DWARF of std and every dependency: about 3 MiB instead of 200 KiB, paid in every
/// compile, cache entry and load. Panic messages keep their locations and traps their
/// function names (the `name` section stays). The fixtures' build script
/// (`tests/fixtures/build.rs`) sets the same, so both builds share compiled dependencies.
const STRIP_DEBUG_INFO: (&str, &str) = ("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");

/// A plugin's sources: a directory of the plugin directory with a `Cargo.toml`, a
/// `package.json` or a `pyproject.toml`.
#[derive(Debug, Clone)]
pub(super) struct PluginSource {
    /// The package name.
    pub(super) name: String,
    /// Its directory.
    pub(super) dir: PathBuf,
    /// What builds it.
    lang: Lang,
}

/// The language of a plugin, and what its build needs to know.
#[derive(Debug, Clone)]
enum Lang {
    Rust {
        /// Where cargo puts what it builds (a workspace member shares the workspace's).
        target_dir: PathBuf,
    },
    JavaScript,
    Python,
}

/// The files whose presence makes a directory a plugin, in the order they are looked for.
pub(super) const PLUGIN_MANIFESTS: [&str; 3] =
    ["Cargo.toml", build_js::PACKAGE_JSON, build_py::PYPROJECT];

/// Whether `dir` holds a plugin's sources.
pub(super) fn is_plugin_dir(dir: &Path) -> bool {
    PLUGIN_MANIFESTS.iter().any(|file| dir.join(file).is_file())
}

impl PluginSource {
    fn manifest(&self) -> PathBuf {
        self.dir.join("Cargo.toml")
    }

    /// The component's file name in the plugin directory: the package name with
    /// underscores, as cargo names the artifact (a JavaScript or Python plugin's is named
    /// alike).
    pub(super) fn wasm_name(&self) -> String {
        format!("{}.wasm", self.name.replace('-', "_"))
    }
}

/// `jobhost build [NAME...]`.
pub(super) async fn run(dir: &Path, names: &[String]) -> anyhow::Result<()> {
    let plugins = select(discover(dir).await?, names)?;
    ensure_toolchains(&plugins).await?;
    let mut failed = Vec::new();
    for plugin in &plugins {
        if build(dir, plugin).await.is_err() {
            failed.push(plugin.name.as_str());
        }
    }
    if !failed.is_empty() {
        bail!(
            "the build of {} failed; the build's errors are above",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Make sure what builds `plugins` is there: the Rust target when one is a crate (a
/// JavaScript or Python plugin's toolchain is checked by its own build, which names what is
/// missing).
pub(super) async fn ensure_toolchains(plugins: &[PluginSource]) -> anyhow::Result<()> {
    if plugins
        .iter()
        .any(|plugin| matches!(plugin.lang, Lang::Rust { .. }))
    {
        ensure_wasm_target().await?;
    }
    Ok(())
}

/// The plugins directly under `dir`, by name.
pub(super) async fn discover(dir: &Path) -> anyhow::Result<Vec<PluginSource>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read the plugin directory `{}`: run from the directory that holds \
             `plugins/`, or pass `--plugins DIR`",
            dir.display()
        )
    })?;
    let mut plugins = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if is_plugin_dir(&path) {
            plugins.push(describe(&path).await?);
        }
    }
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(plugins)
}

fn select(plugins: Vec<PluginSource>, names: &[String]) -> anyhow::Result<Vec<PluginSource>> {
    if names.is_empty() {
        if plugins.is_empty() {
            bail!(
                "no plugin to build: create one with `jobhost new NAME` (Rust), `jobhost new \
                 --lang js NAME` (JavaScript) or `jobhost new --lang python NAME` (Python)"
            );
        }
        return Ok(plugins);
    }
    let known: Vec<&str> = plugins.iter().map(|c| c.name.as_str()).collect();
    for name in names {
        if !known.contains(&name.as_str()) {
            bail!(
                "no plugin named `{name}` in the plugin directory; there are: {}",
                known.join(", ")
            );
        }
    }
    Ok(plugins
        .into_iter()
        .filter(|c| names.contains(&c.name))
        .collect())
}

#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    target_directory: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    manifest_path: PathBuf,
}

/// The plugin in `dir`: a crate when it has a `Cargo.toml`, else a JavaScript package when
/// it has a `package.json`, else a Python project.
pub(super) async fn describe(dir: &Path) -> anyhow::Result<PluginSource> {
    if dir.join("Cargo.toml").is_file() {
        return describe_crate(dir).await;
    }
    let (name, lang) = if dir.join(build_js::PACKAGE_JSON).is_file() {
        (build_js::package_name(dir)?, Lang::JavaScript)
    } else {
        (build_py::project_name(dir)?, Lang::Python)
    };
    Ok(PluginSource {
        name,
        dir: dir.to_owned(),
        lang,
    })
}

/// Ask cargo for the crate's name and target directory, which depend on its workspace.
async fn describe_crate(dir: &Path) -> anyhow::Result<PluginSource> {
    let manifest = dir.join("Cargo.toml");
    let output = cargo()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(&manifest)
        .stderr(Stdio::piped())
        .output()
        .await
        .context("cannot run `cargo metadata`: is cargo installed and on PATH?")?;
    if !output.status.success() {
        bail!(
            "`{}` is not a crate cargo can read:\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).context("cannot read `cargo metadata` output")?;
    let manifest = std::fs::canonicalize(&manifest)?;
    let package = metadata
        .packages
        .into_iter()
        .find(|p| p.manifest_path == manifest)
        .with_context(|| format!("cargo does not list `{}` as a package", manifest.display()))?;
    Ok(PluginSource {
        name: package.name,
        dir: dir.to_owned(),
        lang: Lang::Rust {
            target_dir: metadata.target_directory,
        },
    })
}

/// Build `plugin` and swap its component into `dir`. The build's output, errors included,
/// goes to stderr as it comes.
pub(super) async fn build(dir: &Path, plugin: &PluginSource) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let built = match &plugin.lang {
        Lang::Rust { target_dir } => build_crate(plugin, target_dir).await?,
        // Logged here because `run` and `dev` only count failures, and a missing `npm`
        // or `python3` says so in the error, not in a tool's output above.
        Lang::JavaScript => build_js::build(plugin).await.inspect_err(|err| {
            error!(plugin = %plugin.name, error = format!("{err:#}"), "build failed");
        })?,
        Lang::Python => build_py::build(plugin).await.inspect_err(|err| {
            error!(plugin = %plugin.name, error = format!("{err:#}"), "build failed");
        })?,
    };
    let dest = dir.join(plugin.wasm_name());
    swap_in(&built, &dest)?;
    let size = std::fs::metadata(&dest)
        .map(|m| m.len() / 1024)
        .unwrap_or(0);
    info!(plugin = %plugin.name, file = %dest.display(), size_kib = size, took = ?started.elapsed(), "built");
    Ok(dest)
}

/// Compile a crate; returns where cargo put the component.
///
/// The release profile's debug info is stripped from the component (see
/// [`STRIP_DEBUG_INFO`]), whatever the crate's own profile says.
async fn build_crate(plugin: &PluginSource, target_dir: &Path) -> anyhow::Result<PathBuf> {
    info!(plugin = %plugin.name, "building: cargo build --release --target {WASM_TARGET} -p {}", plugin.name);
    let status = cargo()
        .args([
            "build",
            "--release",
            "--target",
            WASM_TARGET,
            "-p",
            &plugin.name,
        ])
        .arg("--manifest-path")
        .arg(plugin.manifest())
        .env(STRIP_DEBUG_INFO.0, STRIP_DEBUG_INFO.1)
        .kill_on_drop(true)
        .status()
        .await
        .context("cannot run `cargo build`")?;
    if !status.success() {
        error!(plugin = %plugin.name, %status, "build failed; see cargo's errors above");
        bail!("the build of `{}` failed ({status})", plugin.name);
    }
    Ok(target_dir
        .join(WASM_TARGET)
        .join("release")
        .join(plugin.wasm_name()))
}

/// Copy `built` to `dest` through a temporary file in the same directory and a rename, so
/// a host watching the directory never reads a half-written component. The temporary
/// name does not end in `.wasm`, so the host ignores it.
fn swap_in(built: &Path, dest: &Path) -> anyhow::Result<()> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dest.with_file_name(format!(".{name}.tmp"));
    std::fs::copy(built, &temp)
        .with_context(|| format!("cannot copy `{}` to `{}`", built.display(), temp.display()))?;
    std::fs::rename(&temp, dest)
        .with_context(|| format!("cannot move `{}` to `{}`", temp.display(), dest.display()))
}

/// Make sure the toolchain has the plugin target: `rustup target add` it if missing.
async fn ensure_wasm_target() -> anyhow::Result<()> {
    if has_wasm_target().await {
        return Ok(());
    }
    warn!("the `{WASM_TARGET}` target is missing; trying `rustup target add {WASM_TARGET}`");
    let added = Command::new("rustup")
        .args(["target", "add", WASM_TARGET])
        .status()
        .await
        .is_ok_and(|status| status.success());
    if added && has_wasm_target().await {
        return Ok(());
    }
    bail!(
        "the Rust target `{WASM_TARGET}` is not installed and could not be added; run \
         `rustup target add {WASM_TARGET}` and try again"
    )
}

async fn has_wasm_target() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .await
    else {
        return false;
    };
    let libdir = String::from_utf8_lossy(&output.stdout);
    output.status.success() && Path::new(libdir.trim()).is_dir()
}

/// The cargo that runs `jobhost` (under `cargo run`), else the one on PATH.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}
