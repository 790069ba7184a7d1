//! `jobhost dev` as the README runs it: from the directory that holds `plugins/`, with the
//! default relative plugin directory. An edit in place and an editor's write-and-rename
//! each rebuild the plugin, the host swaps the new version in, and a crate added while
//! `dev` runs is built and loaded too. `dev --demo`, run in the repository itself as the
//! README's first command, makes real HTTP requests to its own demo server: a deferral by
//! `Retry-After`, a retry of a 503 and a webhook delivered with a valid signature.
//!
//! The plugin crates build into the fixtures' target directory with the fixtures' profile,
//! so their dependencies are compiled already. The demo needs 127.0.0.1:7879 free.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{
    Host, PROCESSING, fixtures_target_dir, jobhost, json_of, logged_id, stdout_of,
};

/// A cold build of the SDK and serde for `wasm32-wasip2` on a small machine; a rebuild of
/// the scaffold alone takes seconds.
const BUILD: Duration = Duration::from_secs(600);

/// The largest component a small plugin may be (BENCHMARKS.md, "Smaller findings").
const MAX_COMPONENT: u64 = 300 * 1024;

/// `jobhost new NAME` in `work`, with the default plugin directory.
fn scaffold(work: &Path, name: &str) {
    stdout_of(
        &jobhost()
            .args(["new", name])
            .current_dir(work)
            .output()
            .expect("jobhost new runs"),
    );
}

/// Replace `old` by `new` in the file at `path`, writing it in place (same inode).
pub(super) fn edit_in_place(path: &Path, old: &str, new: &str) {
    let text = std::fs::read_to_string(path).expect("the source reads");
    assert!(text.contains(old), "`{old}` is in {}", path.display());
    std::fs::write(path, text.replace(old, new)).expect("the source writes in place");
}

/// Replace `old` by `new` in the file at `path` as `sed -i` does: a new file beside it,
/// renamed over it.
fn edit_by_rename(path: &Path, old: &str, new: &str) {
    let text = std::fs::read_to_string(path).expect("the source reads");
    assert!(text.contains(old), "`{old}` is in {}", path.display());
    let temp = path.with_file_name("sedXy12Ab");
    std::fs::write(&temp, text.replace(old, new)).expect("the new copy writes");
    std::fs::rename(&temp, path).expect("the new copy renames over the source");
}

/// Enqueue a greeting and wait for the line the handler logs for it.
pub(super) fn greeting_logged(host: &Host, job_type: &str, message: &str) -> String {
    let enqueued = json_of(&host.cli(&["enqueue", job_type, r#"{"name": "Ada"}"#, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains(message)
    })
}

/// Wait for the host to load `file` or a new version of it, counting from log line `seen`.
pub(super) fn reloaded(host: &Host, seen: usize, file: &str) {
    host.wait_for_line_after(seen, BUILD, |l| {
        (l.contains("plugin loaded") || l.contains("plugin replaced")) && l.contains(file)
    });
}

#[test]
fn dev_rebuilds_on_edits_in_place_and_by_rename_and_builds_a_crate_added_while_it_runs() {
    let work = tempfile::tempdir().expect("a temp working directory");
    std::fs::create_dir(work.path().join("plugins")).expect("the plugin directory");
    scaffold(work.path(), "tiny");
    let source = work.path().join("plugins/tiny/src/lib.rs");

    let mut command = jobhost();
    command
        .arg("dev")
        .current_dir(work.path())
        .env("CARGO_TARGET_DIR", fixtures_target_dir());
    let host = Host::spawn(command, work, BUILD);
    reloaded(&host, 0, "tiny.wasm");
    host.wait_for_line(PROCESSING, |l| l.contains("watching plugin sources"));
    greeting_logged(&host, "tiny.Greet", "hello");
    let component = host.dir.path().join("plugins/tiny.wasm");
    let size = std::fs::metadata(&component).expect("the component").len();
    assert!(
        size <= MAX_COMPONENT,
        "a scaffold built by `jobhost dev` is at most 300 KiB, not {size} bytes"
    );

    let seen = host.line_count();
    edit_in_place(&source, r#""hello""#, r#""hello in place""#);
    reloaded(&host, seen, "tiny.wasm");
    greeting_logged(&host, "tiny.Greet", "hello in place");

    let seen = host.line_count();
    edit_by_rename(&source, r#""hello in place""#, r#""hello by rename""#);
    reloaded(&host, seen, "tiny.wasm");
    greeting_logged(&host, "tiny.Greet", "hello by rename");

    let seen = host.line_count();
    scaffold(host.dir.path(), "late");
    reloaded(&host, seen, "late.wasm");
    greeting_logged(&host, "late.Greet", "hello");
}

/// The worker's line settling a job of `job_type` as `message`, whose line has `detail`.
fn settled(host: &Host, job_type: &str, message: &str, detail: &str) -> String {
    host.wait_for_line(PROCESSING, |l| {
        l.contains(message) && l.contains(job_type) && l.contains(detail)
    })
}

#[test]
fn dev_demo_makes_real_requests_that_defer_retry_and_deliver_a_signed_webhook() {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate is in the repository");
    let mut command = jobhost();
    command
        .args(["dev", "--demo"])
        .current_dir(repository)
        .env("CARGO_TARGET_DIR", fixtures_target_dir());
    let unused = tempfile::tempdir().expect("a temp directory");
    let host = Host::spawn(command, unused, BUILD);
    host.wait_for_line(BUILD, |l| {
        l.contains("demo HTTP server listening on http://127.0.0.1:7879")
    });
    host.wait_for_line(BUILD, |l| l.contains("demo jobs enqueued"));

    host.wait_for_line(PROCESSING, |l| {
        l.contains("demo server: GET /v1/orders answered 429 Too Many Requests, Retry-After: 1")
    });
    let deferred = settled(&host, "api.CallApi", "job deferred", "/v1/orders");
    assert!(
        deferred.contains("answered 429 Too Many Requests, Retry-After 1s")
            && deferred.contains("delay=1s"),
        "deferred for exactly the second the API asked: {deferred}"
    );
    host.wait_for_line(PROCESSING, |l| {
        l.contains("api call succeeded")
            && l.contains("/v1/orders")
            && l.contains(r#"deferrals="2""#)
    });

    let retried = settled(&host, "api.CallApi", "job failed, retrying", "/v1/flaky");
    assert!(
        retried.contains("503 Service Unavailable without a usable Retry-After"),
        "{retried}"
    );
    host.wait_for_line(PROCESSING, |l| {
        l.contains("api call succeeded") && l.contains("/v1/flaky") && l.contains(r#"attempt="2""#)
    });

    host.wait_for_line(PROCESSING, |l| {
        l.contains("demo server: POST /hook received a webhook with a valid signature")
            && l.contains("order.created")
    });
    host.wait_for_line(PROCESSING, |l| {
        l.contains("webhook delivered") && l.contains(r#"status="204""#)
    });
}
