//! Python plugins as a user makes them, with the real `jobhost` binary: `jobhost new
//! --lang python`, the plugins' own pytest, `jobhost build` (which creates their `.venv`
//! and installs their pinned componentize-py), and `jobhost run` on the memory backend
//! working the example `plugins/email-sender-py` through a retry, a fatal error, a
//! deferral, follow-ups, a payload that does not decode, the schedule and the unique key
//! it declares in force as a Rust plugin's would be, and an HTTP request to a local
//! relay that its grants allow, at a URL and with a token its config values and secrets
//! give (`jobhost_sdk.http`, `jobhost_sdk.config`); `jobhost dev` rebuilding a Python plugin
//! on save.
//!
//! Needs Python 3.11+ with `venv`; a missing one fails the tests unless
//! `JOBHOST_SKIP_PYTHON_TESTS=1`. pip's cache lives under the target directory
//! (`support::python::with_pip_cache`), so only the first run downloads componentize-py.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::cli_dev::{edit_in_place, greeting_logged, reloaded};
use crate::support::cli::{Host, PROCESSING, jobhost, stdout_of, write_grants};
use crate::support::guest::{
    Relay, Relayed, copy_example, email_sender_declares_a_daily_digest_and_unique_message_ids,
    email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups, enqueue, line_of,
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

/// The secret the example sends the relay as its bearer token, from the environment.
const RELAY_TOKEN: &str = "relay-t0k3n-5e1f";

/// The example's relay for its `relayed` addresses: its first request is answered `503`
/// with `Retry-After: 1`, every later one `200` with `{"id": "relay-1"}`.
fn relay() -> Relay {
    Relay::start(|_: &Relayed, before: &[Relayed]| {
        if before.is_empty() {
            (
                "503 Service Unavailable",
                "retry-after: 1\r\n",
                "relay busy".to_owned(),
            )
        } else {
            (
                "200 OK",
                "content-type: application/json\r\n",
                r#"{"id": "relay-1"}"#.to_owned(),
            )
        }
    })
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

    // The example's grants: the relay's origin, its URL as a config value and its token as
    // a secret from the environment, under the section its file names.
    let relay = relay();
    write_grants(
        &work.path().join("jobhost.toml"),
        &format!(
            "[plugins.email_sender_py]\nallowed_outbound_hosts = [\"{origin}\"]\n\
             [plugins.email_sender_py.config]\nrelay_url = \"{origin}\"\n\
             [plugins.email_sender_py.secrets]\nrelay_token = {{ env = \"RELAY_TOKEN\" }}\n",
            origin = relay.origin()
        ),
    );
    let mut run = jobhost();
    run.args(["run", "--plugins", "plugins", "--config", "jobhost.toml"])
        .env("RELAY_TOKEN", RELAY_TOKEN)
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
    email_sender_declares_a_daily_digest_and_unique_message_ids(
        &host,
        "email-sender-py",
        "email.SendEmailPy",
        "email.DailyDigestPy",
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

    // Through `wasi:http`: the relay's 503 with `Retry-After: 1` defers the job 1s as the
    // service's wait, and its 200 completes it on the same attempt.
    let relayed = enqueue(
        &host,
        "email.SendEmailPy",
        r#"{"to": "relayed@example.com", "subject": "s", "body": "b"}"#,
    );
    let deferred = line_of(&host, &relayed, &["job deferred"]);
    assert!(
        deferred.contains("delay=1s")
            && deferred.contains("answered 503 Service Unavailable, Retry-After 1s"),
        "the relay's Retry-After deferred the job: {deferred}"
    );
    line_of(&host, &relayed, &["email relayed", r#"relay_id="relay-1""#]);
    line_of(&host, &relayed, &["job completed", "attempt=1"]);
    let requests = relay.received();
    assert_eq!(requests.len(), 2, "one request per run: {requests:?}");
    for request in &requests {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/send"),
            "{request:?}"
        );
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {RELAY_TOKEN}").as_str()),
            "the secret reached the guest: {request:?}"
        );
        assert!(
            request.body.contains(r#""to":"relayed@example.com""#),
            "{request:?}"
        );
    }
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
