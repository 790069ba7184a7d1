//! Building a Python plugin: a directory with a `pyproject.toml` (and neither a
//! `Cargo.toml` nor a `package.json`), as `jobhost new --lang python` makes it.
//!
//! 1. The plugin's own virtual environment, `.venv/`, is created with `python3 -m venv`
//!    when missing, and `pip install -r requirements.txt` runs in it when the last install
//!    is older than `requirements.txt` or `pyproject.toml`: the plugin pins its build tools
//!    there (componentize-py, exact version) beside the SDK and pytest, so nothing is
//!    installed globally and two plugins may pin different versions.
//! 2. The WIT this binary speaks is written to `.jobhost/wit/`, so the component is built
//!    against the contract of the host that loads it.
//! 3. `.venv/bin/python -m jobhost_sdk.build` imports the plugin natively (a bad retry
//!    policy fails here, with the SDK's message) and runs componentize-py; the component
//!    lands in `.jobhost/`, for [`super::build`] to swap in.
//!
//! Every step's output goes to stderr as it comes; a missing `python3` is an error naming
//! what to install.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use tracing::info;

use super::build::PluginSource;
use super::guest_toolchain::{SCRATCH, installed_since, run_step, tool, write_wit};

/// The file that makes a directory a Python plugin.
pub(super) const PYPROJECT: &str = "pyproject.toml";

/// What `pip` installs into the plugin's environment: the SDK, componentize-py, pytest and
/// the plugin's own dependencies.
const REQUIREMENTS: &str = "requirements.txt";

/// The plugin's virtual environment (the scaffold's `.gitignore` lists it).
const VENV: &str = ".venv";

/// Written after a successful `pip install`, so the next build skips it until
/// `requirements.txt` or `pyproject.toml` changes.
const INSTALL_RECORD: &str = ".venv/.jobhost-installed";

const NO_PYTHON: &str = "cannot run `python3`: Python plugins need Python 3.11 or later with \
                         its `venv` module on PATH (on Debian: `apt-get install python3 \
                         python3-venv`)";

const NO_VENV: &str = "cannot run the plugin's `.venv/bin/python`: delete the plugin's `.venv` \
                       and build again, which creates it anew";

#[derive(Debug, Deserialize)]
struct PyProject {
    project: Option<Project>,
}

#[derive(Debug, Deserialize)]
struct Project {
    name: Option<String>,
}

/// The `[project] name` of the plugin's `pyproject.toml`, which names its component.
pub(super) fn project_name(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(PYPROJECT);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let project: PyProject = toml::from_str(&text)
        .with_context(|| format!("`{}` is not a pyproject.toml pip can read", path.display()))?;
    match project.project.and_then(|p| p.name) {
        Some(name)
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            Ok(name)
        }
        _ => bail!(
            "`{}` needs a `[project] name` of letters, digits, `-` and `_` (it names the \
             component)",
            path.display()
        ),
    }
}

/// Build the Python plugin; returns where its component was written.
pub(super) async fn build(plugin: &PluginSource) -> anyhow::Result<PathBuf> {
    // Absolute, because the script runs in the plugin's directory and is given paths in it.
    let dir = std::fs::canonicalize(&plugin.dir)
        .with_context(|| format!("cannot resolve `{}`", plugin.dir.display()))?;
    install(&dir).await?;
    let wit = write_wit(&dir)?;
    let out = dir.join(SCRATCH).join(plugin.wasm_name());
    info!(plugin = %plugin.name, "building: python -m jobhost_sdk.build (componentize-py)");
    run_step(
        tool(python(&dir))
            .args(["-m", "jobhost_sdk.build", "--wit"])
            .arg(&wit)
            .arg("--out")
            .arg(&out)
            // Importing the plugin must not write `src/__pycache__`: under `jobhost dev`,
            // a write in `src/` is an edit, and the build would start itself again.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&dir),
        "the build script",
        NO_VENV,
    )
    .await?;
    Ok(out)
}

/// Create the plugin's `.venv` if missing and `pip install -r requirements.txt` in it,
/// unless the last install is newer than what it installs from.
pub(super) async fn install(dir: &Path) -> anyhow::Result<()> {
    if installed_since(dir, INSTALL_RECORD, &[REQUIREMENTS, PYPROJECT]) {
        return Ok(());
    }
    if !python(dir).is_file() {
        info!(dir = %dir.display(), "creating the plugin's environment: python3 -m venv {VENV}");
        run_step(
            tool("python3").args(["-m", "venv", VENV]).current_dir(dir),
            &format!("`python3 -m venv {VENV}` in `{}`", dir.display()),
            NO_PYTHON,
        )
        .await?;
    }
    info!(dir = %dir.display(), "installing the plugin's packages: pip install -r {REQUIREMENTS}");
    run_step(
        tool(python(dir))
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-r"])
            .arg(REQUIREMENTS)
            .current_dir(dir),
        &format!("`pip install -r {REQUIREMENTS}` in `{}`", dir.display()),
        NO_VENV,
    )
    .await?;
    let record = dir.join(INSTALL_RECORD);
    std::fs::write(
        &record,
        "written by `jobhost build` after `pip install -r requirements.txt`\n",
    )
    .with_context(|| format!("cannot write `{}`", record.display()))
}

/// The interpreter of the plugin's environment.
fn python(dir: &Path) -> PathBuf {
    dir.join(VENV).join("bin/python")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pyproject_names_its_plugin_and_a_missing_or_odd_name_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write = |text: &str| std::fs::write(dir.path().join(PYPROJECT), text).expect("writes");
        write("[project]\nname = \"greeter-py\"\nversion = \"0.1.0\"\n");
        assert_eq!(project_name(dir.path()).expect("a name"), "greeter-py");
        for bad in [
            "[project]\nname = \"../greeter\"\n",
            "[tool.pytest.ini_options]\n",
            "[project]\nname = \"\"\n",
            "not toml = = =",
        ] {
            write(bad);
            assert!(project_name(dir.path()).is_err(), "{bad} is refused");
        }
    }
}
