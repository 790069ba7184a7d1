//! A Python plugin on the broker: the example `plugins/email-sender-py`, built by `jobhost
//! build` and run by `jobhost run --amqp`, works its jobs through a retry, a fatal error,
//! a deferral and follow-ups, the waits in the broker's hold queues. The example's queue
//! names are fixed, so the host runs in a virtual host of its own, deleted after.
//!
//! Needs Python 3.11+ with `venv` too (`JOBHOST_SKIP_PYTHON_TESTS=1` skips it without).
//!
//! ```text
//! cargo test -p jobhost --test rabbitmq rabbitmq_python:: -- --nocapture
//! ```

use std::time::Duration;

use crate::support::cli::{Host, jobhost};
use crate::support::guest::{
    copy_example, email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups,
};
use crate::support::{Vhost, python, skip_requested};

/// A componentize-py build on a small busy machine, its `.venv` installed first.
const BUILD: Duration = Duration::from_secs(600);

/// How long the host may take to compile the component (~19 MB) and declare its queues.
const LOAD: Duration = Duration::from_secs(300);

#[test]
fn a_python_plugin_on_rabbitmq_works_through_retries_a_fatal_error_a_deferral_and_follow_ups() {
    if skip_requested() || !python::available() {
        return;
    }
    // Declared first, so it is deleted last, after the host has closed its connection.
    let vhost = Vhost::new("python");
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
    let built = python::build(work.path());
    assert!(
        built.status.success(),
        "the example builds as written; stderr:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let mut run = jobhost();
    run.args(["run", "--amqp", &vhost.url, "--plugins", "plugins"])
        .current_dir(work.path());
    let host = Host::spawn(run, work, BUILD);
    host.wait_for_line(LOAD, |l| {
        l.contains("consuming") && l.contains("queue=examples.emails-py ")
    });
    email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups(
        &host,
        "email.SendEmailPy",
    );
}
