//! JavaScript plugins as a user makes them, with the real `jobhost` binary: `jobhost new
//! --lang js`, the plugins' own `node --test`, `jobhost build` (which installs their pinned
//! componentize-js), and `jobhost run` on the memory backend working the example
//! `plugins/email-sender-js` through a retry, a fatal error, a deferral and follow-ups.
//!
//! Needs Node.js 20+ and npm; a missing one fails the test unless
//! `JOBHOST_SKIP_JS_TESTS=1`. npm's cache lives under the target directory
//! (`support::node::npm_cache`), so only the first run downloads componentize-js.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::cli::{Host, jobhost, stdout_of};
use crate::support::guest::{
    copy_example, email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups,
    enqueue, line_of,
};
use crate::support::node;

/// `npm install` from a cold cache (about 390 MB), and a componentize-js build of each
/// plugin, on a small busy machine.
const BUILD: Duration = Duration::from_secs(600);

/// How long a host may take to compile two JavaScript components (~12 MB each) when
/// they are not in its compiled-artifact cache yet.
const LOAD: Duration = Duration::from_secs(300);

/// The example's files a user writes (not what npm or the build add).
const EXAMPLE_FILES: [&str; 4] = [
    "package.json",
    "src/plugin.js",
    "test/plugin.test.js",
    ".gitignore",
];

/// `node --test` in `dir` passes.
fn node_tests_pass(dir: &Path) {
    let output = Command::new("node")
        .arg("--test")
        .current_dir(dir)
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "`node --test` passes in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_js_plugin_is_scaffolded_built_and_run_through_retries_a_fatal_error_a_deferral_and_follow_ups()
{
    if !node::available() {
        return;
    }
    let work = tempfile::tempdir().expect("a temp working directory");
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).expect("the plugin directory");
    copy_example(
        &plugins,
        "email-sender-js",
        &EXAMPLE_FILES,
        "package.json",
        "sdk-js",
    );

    let mut new = jobhost();
    node::with_npm_cache(&mut new)
        .args(["new", "--lang", "js", "greeter-js"])
        .current_dir(work.path());
    stdout_of(&new.output().expect("jobhost new runs"));
    node_tests_pass(&plugins.join("greeter-js"));

    let mut build = jobhost();
    node::with_npm_cache(&mut build)
        .arg("build")
        .current_dir(work.path());
    let built = build.output().expect("jobhost build runs");
    assert!(
        built.status.success(),
        "both plugins build as written; stderr:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    node_tests_pass(&plugins.join("email-sender-js"));
    for file in ["greeter_js.wasm", "email_sender_js.wasm"] {
        let size = std::fs::metadata(plugins.join(file))
            .expect("the component")
            .len();
        eprintln!("{file}: {size} bytes");
    }

    let mut run = jobhost();
    run.args(["run", "--plugins", "plugins"])
        .current_dir(work.path());
    let host = Host::spawn(run, work, BUILD);
    for file in ["greeter_js.wasm", "email_sender_js.wasm"] {
        host.wait_for_line(LOAD, |l| l.contains("plugin loaded") && l.contains(file));
    }

    let greeting = enqueue(&host, "greeter_js.Greet", r#"{"name": "Ada"}"#);
    line_of(&host, &greeting, &["hello", r#"name="Ada""#]);
    line_of(&host, &greeting, &["job completed"]);

    email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups(
        &host,
        "email.SendEmailJs",
    );
}
