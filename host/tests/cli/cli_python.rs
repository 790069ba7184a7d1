//! Python plugins as a user makes them, with the real `jobhost` binary: `jobhost new
//! --lang python`, the plugins' own pytest, `jobhost build` (which creates their `.venv`
//! and installs their pinned componentize-py), and `jobhost run` on the memory backend
//! working the example `plugins/email-sender-py` through a retry, a fatal error, a
//! deferral, follow-ups and a payload that does not decode; `jobhost dev` rebuilding a
//! Python plugin on save.
//!
//! Needs Python 3.11+ with `venv`; a missing one fails the tests unless
//! `JOBHOST_SKIP_PYTHON_TESTS=1`. pip's cache lives under the target directory
//! (`support::python::with_pip_cache`), so only the first run downloads componentize-py.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::cli_dev::{edit_in_place, greeting_logged, reloaded};
use crate::support::cli::{Host, PROCESSING, jobhost, stdout_of};
use crate::support::guest::{
    copy_example, email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups,
    enqueue, line_of,
};
use crate::support::python;

/// Creating each plugin's `.venv` and installing into it from a cold cache, and a
/// componentize-py build of each plugin, on a small busy machine.
const BUILD: Duration = Duration::from_secs(600);

/// How long a host may take to compile two Python components (~19 MB each) when they are
/// not in its compiled-artifact cache yet.
const LOAD: Duration = Duration::from_secs(300);

/// The plugin's own pytest, from its `.venv`, passes in `dir`.
fn pytest_passes(dir: &Path) {
    let output = Command::new(dir.join(".venv/bin/python"))
        .args(["-m", "pytest", "-q"])
        .current_dir(dir)
        .output()
        .expect("the plugin's python runs");
    assert!(
        output.status.success(),
        "pytest passes in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `jobhost new --lang python NAME` in `work`, whose plugin directory is `plugins/`.
fn scaffold(work: &Path, name: &str) {
    let mut new = jobhost();
    python::with_pip_cache(&mut new)
        .args(["new", "--lang", "python", name])
        .current_dir(work);
    stdout_of(&new.output().expect("jobhost new runs"));
}

#[test]
fn a_python_plugin_is_scaffolded_built_and_run_through_retries_a_fatal_error_a_deferral_and_follow_ups()
 {
    if !python::available() {
        return;
    }
    let work = tempfile::tempdir().expect("a temp working directory");
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).expect("the plugin directory");
    copy_example(
        &plugins,
        "email-sender-py",
        &python::EXAMPLE_FILES,
        "requirements.txt",
        "sdk-python",
    );
    scaffold(work.path(), "greeter-py");
    pytest_passes(&plugins.join("greeter-py"));

    let built = python::build(work.path());
    assert!(
        built.status.success(),
        "both plugins build as written; stderr:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    pytest_passes(&plugins.join("email-sender-py"));
    for file in ["greeter_py.wasm", "email_sender_py.wasm"] {
        let size = std::fs::metadata(plugins.join(file))
            .expect("the component")
            .len();
        eprintln!("{file}: {size} bytes");
    }

    let mut run = jobhost();
    run.args(["run", "--plugins", "plugins"])
        .current_dir(work.path());
    let host = Host::spawn(run, work, BUILD);
    for file in ["greeter_py.wasm", "email_sender_py.wasm"] {
        host.wait_for_line(LOAD, |l| l.contains("plugin loaded") && l.contains(file));
    }

    let greeting = enqueue(&host, "greeter_py.Greet", r#"{"name": "Ada"}"#);
    line_of(&host, &greeting, &["hello", r#"name="Ada""#]);
    line_of(&host, &greeting, &["job completed"]);
    let nobody = enqueue(&host, "greeter_py.Greet", r#"{"name": ""}"#);
    line_of(
        &host,
        &nobody,
        &["job dead-lettered", "nobody to greet", "attempt=1"],
    );

    email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups(
        &host,
        "email.SendEmailPy",
    );
    let not_an_email = enqueue(&host, "email.SendEmailPy", r#"{"to": 42}"#);
    line_of(
        &host,
        &not_an_email,
        &[
            "job dead-lettered",
            "decode error",
            "an email needs string fields to, subject, body",
        ],
    );
}

#[test]
fn a_python_plugin_whose_retry_policy_the_grammar_refuses_fails_its_build_naming_the_problem() {
    if !python::available() {
        return;
    }
    let work = tempfile::tempdir().expect("a temp working directory");
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).expect("the plugin directory");
    scaffold(work.path(), "greeter-py");
    let source = plugins.join("greeter-py/src/plugin.py");
    let text = std::fs::read_to_string(&source).expect("the scaffold's module");
    let policy = "Retry(max_attempts=3)";
    assert!(text.contains(policy), "{text}");
    std::fs::write(
        &source,
        text.replace(policy, r#"Retry(max_attempts=3, delay="5s")"#),
    )
    .expect("the edit");

    let built = python::build(work.path());
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(!built.status.success(), "the build fails:\n{stderr}");
    assert!(
        stderr.contains(
            r#"error: queue "greeter_py.work": retry: `delay` applies only to `backoff="fixed"`"#
        ),
        "the SDK's message names the queue and the key:\n{stderr}"
    );
    assert!(
        !plugins.join("greeter_py.wasm").exists(),
        "no component is written"
    );
}

#[test]
fn dev_rebuilds_a_python_plugin_when_its_module_is_saved() {
    if !python::available() {
        return;
    }
    let work = tempfile::tempdir().expect("a temp working directory");
    std::fs::create_dir(work.path().join("plugins")).expect("the plugin directory");
    scaffold(work.path(), "greeter-py");

    let mut dev = jobhost();
    python::with_pip_cache(&mut dev)
        .arg("dev")
        .current_dir(work.path());
    let host = Host::spawn(dev, work, BUILD);
    reloaded(&host, 0, "greeter_py.wasm");
    host.wait_for_line(PROCESSING, |l| l.contains("watching plugin sources"));
    greeting_logged(&host, "greeter_py.Greet", "hello");

    let seen = host.line_count();
    let source = host.dir.path().join("plugins/greeter-py/src/plugin.py");
    edit_in_place(&source, r#""hello""#, r#""hello again""#);
    reloaded(&host, seen, "greeter_py.wasm");
    greeting_logged(&host, "greeter_py.Greet", "hello again");
}
