//! Node.js and npm, which JavaScript plugins build with: whether the tests that need them
//! run, and the package cache they share between runs, so componentize-js (about 390 MB
//! unpacked, a 40 s download on a fresh machine) is fetched once per target directory.

use std::path::PathBuf;
use std::process::Command;

/// Set to `1` to skip the JavaScript plugin tests on a machine without Node.js and npm;
/// without it, a missing `node` or `npm` fails them, so they never pass silently.
pub const SKIP_VARIABLE: &str = "JOBHOST_SKIP_JS_TESTS";

/// Whether the JavaScript tests run: `false` (skip) only when `node` or `npm` is missing
/// and [`SKIP_VARIABLE`] asks to skip; a missing tool fails otherwise.
pub fn available() -> bool {
    let missing: Vec<&str> = ["node", "npm"]
        .into_iter()
        .filter(|tool| {
            !Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var(SKIP_VARIABLE).as_deref() == Ok("1"),
        "{missing:?} missing from PATH: install Node.js 20 or later with npm, or set \
         {SKIP_VARIABLE}=1 to skip the JavaScript plugin tests"
    );
    eprintln!("skipping: {missing:?} missing and {SKIP_VARIABLE}=1");
    false
}

/// npm's cache for the tests, under the target directory so that `cargo clean` clears it
/// and every later run installs from it without asking the registry again.
pub fn npm_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm-cache")
}

/// `command` (a `jobhost` that runs `npm install`) with npm pointed at [`npm_cache`],
/// preferring what the cache holds to asking the registry.
pub fn with_npm_cache(command: &mut Command) -> &mut Command {
    command
        .env("npm_config_cache", npm_cache())
        .env("npm_config_prefer_offline", "true")
}
