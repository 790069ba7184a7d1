//! JavaScript plugins as a user makes them, with the real `jobhost` binary: `jobhost new
//! --lang js`, the plugins' own `node --test`, `jobhost build` (which installs their pinned
//! componentize-js), and `jobhost run` on the memory backend working the example
//! `plugins/email-sender-js` through a retry, a fatal error, a deferral and follow-ups,
//! with the schedule and the unique key it declares in force as a Rust plugin's would be,
//! then through the SDK's `http` and `config`: the operator's grants file gives the example
//! a relay URL (a config value), a token (a secret) and the relay's origin, and a local
//! relay answers its POSTs, once with `503` and `Retry-After`, which defers the job.
//!
//! Needs Node.js 20+ and npm; a missing one fails the test unless
//! `JOBHOST_SKIP_JS_TESTS=1`. npm's cache lives under the target directory
//! (`support::node::npm_cache`), so only the first run downloads componentize-js.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::cli::{Host, jobhost, stdout_of, write_grants};
use crate::support::guest::{
    Relay, Relayed, copy_example, email_sender_declares_a_daily_digest_and_unique_message_ids,
    email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups, enqueue, line_of,
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

/// The relay token the grants file gives the example as a secret, through the environment.
const RELAY_TOKEN: &str = "relay-t0k3n-7d1e";

/// The example's relay: a request without the bearer token gets `401`, the first email to
/// `relay-busy@...` `503` with `Retry-After: 1`, everything else `202`.
fn relay() -> Relay {
    Relay::start(|request: &Relayed, before: &[Relayed]| {
        let busy_before = before.iter().any(|r| r.body.contains("relay-busy"));
        if request.authorization.as_deref() != Some(&format!("Bearer {RELAY_TOKEN}")) {
            ("401 Unauthorized", "", "who are you?\n".to_owned())
        } else if request.body.contains("relay-busy") && !busy_before {
            (
                "503 Service Unavailable",
                "retry-after: 1\r\n",
                "busy\n".to_owned(),
            )
        } else {
            ("202 Accepted", "", "queued\n".to_owned())
        }
    })
}

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
fn a_js_plugin_is_scaffolded_built_and_run_through_failures_follow_ups_and_its_configured_relay() {
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

    // The operator's grants: the relay's origin, its URL as a config value, its token as a
    // secret read from the environment.
    let relay = relay();
    let grants = work.path().join("jobhost.toml");
    write_grants(
        &grants,
        &format!(
            "[plugins.email_sender_js]\n\
             allowed_outbound_hosts = [\"http://{addr}\"]\n\
             [plugins.email_sender_js.config]\n\
             relay_url = \"http://{addr}/relay/send?key=k\"\n\
             [plugins.email_sender_js.secrets]\n\
             relay_token = {{ env = \"RELAY_TOKEN\" }}\n",
            addr = relay.addr
        ),
    );
    let mut run = jobhost();
    run.args(["run", "--plugins", "plugins", "--config"])
        .arg(&grants)
        .env("RELAY_TOKEN", RELAY_TOKEN)
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
    email_sender_declares_a_daily_digest_and_unique_message_ids(
        &host,
        "email-sender-js",
        "email.SendEmailJs",
        "email.DailyDigestJs",
    );

    // Through the relay: its 503 with Retry-After defers the job for as long, by the Rust
    // SDK's table and with its reason; the next delivery is relayed and completes.
    let busy = enqueue(
        &host,
        "email.SendEmailJs",
        r#"{"to": "relay-busy@example.com", "subject": "s", "body": "b"}"#,
    );
    let deferred = line_of(&host, &busy, &["job deferred"]);
    assert!(
        deferred.contains("POST http://")
            && deferred.contains("/relay/send answered 503 Service Unavailable, Retry-After 1s")
            && deferred.contains("delay=1s"),
        "the relay's Retry-After, without the URL's query: {deferred}"
    );
    line_of(&host, &busy, &["email relayed", r#"status="202""#]);
    line_of(&host, &busy, &["job completed"]);

    let received = relay.received();
    let busy_posts: Vec<&Relayed> = received
        .iter()
        .filter(|r| r.body.contains("relay-busy@example.com"))
        .collect();
    assert_eq!(
        busy_posts.len(),
        2,
        "deferred once, then relayed: {received:?}"
    );
    let sent_before = ["flaky@example.com", "greylisted@example.com"];
    for to in sent_before {
        assert!(
            received.iter().any(|r| r.body.contains(to)),
            "every email sent went through the relay: {to} in {received:?}"
        );
    }
    for request in &received {
        assert_eq!(
            request.path, "/relay/send?key=k",
            "the URL is the config value"
        );
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {RELAY_TOKEN}").as_str()),
            "the token is the secret"
        );
    }
    assert!(
        host.log_lines().iter().all(|l| !l.contains(RELAY_TOKEN)),
        "no log line shows the secret"
    );
}
