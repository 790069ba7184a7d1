//! `jobhost new --lang python NAME`: a Python plugin that builds, loads and passes its own
//! pytest as generated.
//!
//! The project's `requirements.txt` installs the Python SDK editable by path (the
//! `sdk-python` of the repository that holds the plugin directory, else of the tree this
//! binary was built from; `jobhost-sdk` is not published on PyPI) and pins its build tools
//! exactly (componentize-py, and pytest for its tests), so `jobhost build` installs them
//! into the plugin's own `.venv`. `jobhost new` creates that environment itself, so that
//! `.venv/bin/pytest` passes at once.

use std::path::Path;

use anyhow::{Context, bail};
use tracing::{info, warn};

use super::build_py;
use super::scaffold::{FoundSdk, find_sdk, snake, write};

/// Where this binary's own Python SDK lies, for a plugin directory outside the repository.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk-python");

/// The componentize-py every new plugin pins: the version this host's tests build with.
const COMPONENTIZE_PY: &str = "0.25.0";

/// The pytest every new plugin pins, to run its handler's tests natively.
const PYTEST: &str = "9.2.0";

/// Write the Python plugin `name` at `root`, in the plugin directory `dir`, and create its
/// environment.
pub(super) async fn run(
    dir: &Path,
    root: &Path,
    name: &str,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    let sdk = match sdk {
        Some(path) => match std::fs::canonicalize(path) {
            Ok(sdk) if is_sdk(&sdk) => sdk.display().to_string(),
            _ => bail!(
                "`{}` is not the jobhost Python SDK: with `--lang python`, `--sdk` names the \
                 directory of `jobhost-sdk` (a jobhost checkout's `sdk-python` directory)",
                path.display()
            ),
        },
        None => match find_sdk(root, "sdk-python", Path::new(BUILT_FROM_SDK), is_sdk) {
            FoundSdk::Above { up, .. } => format!("{up}sdk-python"),
            FoundSdk::At(sdk) => sdk.display().to_string(),
            FoundSdk::Nowhere => bail!(
                "no jobhost Python SDK found (none in a repository above the plugin \
                 directory, and the source tree this binary was built from is gone), and \
                 `jobhost-sdk` is not published: run `jobhost new --lang python` again with \
                 `--sdk PATH` naming a jobhost checkout's `sdk-python` directory"
            ),
        },
    };
    for sub in ["src", "tests"] {
        std::fs::create_dir_all(root.join(sub))
            .with_context(|| format!("cannot create `{}`", root.display()))?;
    }
    write(&root.join(build_py::PYPROJECT), &pyproject(name))?;
    write(&root.join("requirements.txt"), &requirements(&sdk))?;
    write(&root.join("src/plugin.py"), &plugin(name))?;
    write(&root.join("tests/test_plugin.py"), &tests(name))?;
    write(
        &root.join(".gitignore"),
        ".venv/\n.jobhost/\n__pycache__/\n.pytest_cache/\n",
    )?;
    info!(plugin_dir = %root.display(), "created Python plugin `{name}`");
    if let Err(err) = build_py::install(root).await {
        warn!(
            error = format!("{err:#}"),
            "the plugin is written, but its environment is not installed: run `python3 -m \
             venv .venv && .venv/bin/pip install -r requirements.txt` in it"
        );
    }
    println!(
        "Created {root}.\nNext: edit src/plugin.py and run `.venv/bin/pytest` in it; then \
         `jobhost build {name}` builds it into {dir}/{snake}.wasm, where a running host loads it.",
        root = root.display(),
        dir = dir.display(),
        snake = snake(name),
    );
    Ok(())
}

fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(build_py::PYPROJECT))
        .is_ok_and(|project| project.contains("name = \"jobhost-sdk\""))
}

fn pyproject(name: &str) -> String {
    format!(
        r#"[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11"
# What it imports, the SDK and its pinned build tools are in requirements.txt, which
# `jobhost build` installs into .venv.

[tool.jobhost]
# The module of src/ that binds `PLUGIN = plugin(...)`.
module = "plugin"

[tool.pytest.ini_options]
pythonpath = ["src"]
testpaths = ["tests"]
"#
    )
}

fn requirements(sdk: &str) -> String {
    format!(
        "# Installed into .venv by `jobhost build` (and `jobhost new`); paths are relative to\n\
         # this directory. Add what the plugin imports (pure-Python packages) below.\n\
         -e {sdk}\n\
         componentize-py=={COMPONENTIZE_PY}\n\
         pytest=={PYTEST}\n"
    )
}

fn plugin(name: &str) -> String {
    let snake = snake(name);
    format!(
        r#""""The `{name}` plugin: job type `{snake}.Greet` on queue `{snake}.work`.

Build it with `jobhost build {name}`; a running host loads it from the plugin directory.
Try it with `jobhost enqueue {snake}.Greet '{{"name": "Ada"}}'`. `.venv/bin/pytest` runs the
handler natively (see tests/test_plugin.py).
"""

from typing import TypedDict

from jobhost_sdk import Context, Retry, fatal, job, plugin, queue

# Three attempts with exponential waits (1s, 2s) before a job is dead-lettered.
work = queue("{snake}.work", retry=Retry(max_attempts=3))


class Greeting(TypedDict):
    name: str


def greet(greeting: Greeting, ctx: Context) -> None:
    """Greets `greeting["name"]`; an empty name is fatal, since no retry can fix it."""
    if not greeting.get("name"):
        raise fatal("nobody to greet: `name` is empty")
    ctx.log("info", "hello", name=greeting["name"])


PLUGIN = plugin(
    name="{name}",
    queues=[work],
    jobs=[job("{snake}.Greet", queue=work, handler=greet)],
)
"#
    )
}

fn tests(name: &str) -> String {
    format!(
        r#""""pytest runs the `{name}` handler natively, with a fake context."""

from jobhost_sdk import fatal
from jobhost_sdk.testing import TestContext

from plugin import greet


def test_a_name_is_greeted_in_the_log():
    run = TestContext().run(greet, {{"name": "Ada"}})
    assert run.error is None
    assert run.messages() == ["hello"]
    assert run.logs[0].field("name") == "Ada"


def test_an_empty_name_is_fatal_on_any_attempt():
    run = TestContext(attempt=2).run(greet, {{"name": ""}})
    assert run.error == fatal("nobody to greet: `name` is empty")
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaffold_and_the_example_pin_the_same_build_tools_exactly() {
        let example = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugins/email-sender-py/requirements.txt"
        );
        let example = std::fs::read_to_string(example).expect("the example");
        let scaffold = requirements("../../sdk-python");
        for pin in [
            format!("componentize-py=={COMPONENTIZE_PY}\n"),
            format!("pytest=={PYTEST}\n"),
            "-e ../../sdk-python\n".to_owned(),
        ] {
            assert!(scaffold.contains(&pin), "the scaffold has {pin}");
            assert!(example.contains(&pin), "the example has {pin}");
        }
    }
}
