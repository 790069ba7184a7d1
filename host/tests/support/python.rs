//! Python 3 with `venv`, which Python plugins build with: whether the tests that need it
//! run, and the pip cache they share between runs, so componentize-py (an 18 MB wheel) is
//! downloaded once per target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::cli::jobhost;

/// Set to `1` to skip the Python plugin tests on a machine without Python 3 and its `venv`
/// module; without it, a missing one fails them, so they never pass silently.
pub const SKIP_VARIABLE: &str = "JOBHOST_SKIP_PYTHON_TESTS";

/// Whether the Python tests run: `false` (skip) only when `python3` or its `venv` module
/// (with `ensurepip`, a separate package on Debian) is missing and [`SKIP_VARIABLE`] asks to
/// skip; a missing one fails otherwise.
pub fn available() -> bool {
    let present = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .is_ok_and(|out| out.status.success());
    if present {
        return true;
    }
    assert!(
        std::env::var(SKIP_VARIABLE).as_deref() == Ok("1"),
        "`python3` with its `venv` module is missing: install Python 3.11 or later (on Debian: \
         `apt-get install python3 python3-venv`), or set {SKIP_VARIABLE}=1 to skip the Python \
         plugin tests"
    );
    eprintln!("skipping: python3 or its venv module missing and {SKIP_VARIABLE}=1");
    false
}

/// The files of the example `plugins/email-sender-py` a user writes (not what pip or the
/// build add), for [`copy_example`](super::guest::copy_example).
pub const EXAMPLE_FILES: [&str; 5] = [
    "pyproject.toml",
    "requirements.txt",
    "src/plugin.py",
    "tests/test_plugin.py",
    ".gitignore",
];

/// `jobhost build` run in `work`, whose plugin directory is `plugins/`, to its end.
pub fn build(work: &Path) -> Output {
    let mut build = jobhost();
    with_pip_cache(&mut build)
        .arg("build")
        .current_dir(work)
        .output()
        .expect("jobhost build runs")
}

/// `command` (a `jobhost` that runs `pip install`) with pip's cache under the target
/// directory, so that `cargo clean` clears it and later runs install from it.
pub fn with_pip_cache(command: &mut Command) -> &mut Command {
    command.env("PIP_CACHE_DIR", pip_cache())
}

fn pip_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pip-cache")
}
