//! `jobhost run` on the memory backend, driven through the real binary: enqueue (with an
//! expiry too), dead letters, policies, pausing a queue and cancelling a job, exit codes
//! and a clean Ctrl-C, also while a plugin hangs loading; a log without credentials, and
//! `jobhost dashboard`'s link; plugin files that are too large or not regular files refused
//! without being read.

use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::support::cli::{
    Host, PROCESSING, STARTUP, http_get, jobhost, json_of, logged_id, mkfifo, sparse_file,
    stdout_of,
};

#[test]
fn an_enqueued_job_is_processed_by_the_running_host() {
    let host = Host::start(&["scripted"]);
    let output = host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        r#"{"key": "ok@example.com"}"#,
        "--json",
    ]);
    let enqueued = json_of(&output);
    assert_eq!(
        enqueued["queue"], "test.emails",
        "the job goes to its route's queue"
    );
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job completed")
    });
}

#[test]
fn a_job_enqueued_with_expires_in_runs_before_its_deadline_and_is_dead_lettered_after_it() {
    let host = Host::start(&["scripted"]);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let on_time = json_of(&host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        r#"{"key": "on-time@example.com"}"#,
        "--expires-in",
        "10m",
        "--json",
    ]));
    let expires_at_ms = u128::from(on_time["expires_at_ms"].as_u64().expect("an expiry"));
    assert!(
        (before + 600_000..before + 660_000).contains(&expires_at_ms),
        "ten minutes from the enqueue: {expires_at_ms}, enqueued after {before}"
    );
    let job_id = on_time["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job completed")
    });

    // Delivered after 2 s, a second after its deadline.
    let said = stdout_of(&host.cli(&[
        "enqueue",
        "scripted.BareJob",
        r#"{"key": "late"}"#,
        "--delay",
        "2s",
        "--expires-in",
        "1s",
    ]));
    assert!(
        said.contains(", delivered in 2s, expires at 20"),
        "the command says when the job expires: {said}"
    );
    let job_id = said
        .split("as job ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the command names the job")
        .to_owned();
    let expired = host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job expired")
    });
    assert!(
        expired.contains("expired: delivered at "),
        "the log says why: {expired}"
    );
    let listed = stdout_of(&host.cli(&["dead", "list", "test.bare"]));
    assert!(
        listed.contains(&job_id) && listed.contains("expired: delivered at "),
        "`dead list` shows the expired job; it printed:\n{listed}"
    );
    assert!(
        !host
            .log_lines()
            .iter()
            .any(|l| l.contains(logged_id(&job_id)) && l.contains("job dead-lettered")),
        "an expired job is not reported as a failure"
    );
}

#[test]
fn a_host_told_to_use_one_thread_runs_on_one_and_processes_jobs() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("scripted"),
        dir.path().join("scripted.wasm"),
    )
    .expect("the fixture copies into the plugin directory");
    let mut command = jobhost();
    // Two by the environment, so that the flag, not a one-core machine, makes it one.
    command
        .env("TOKIO_WORKER_THREADS", "2")
        .args(["run", "--threads", "1", "--plugins"])
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    host.wait_for_line(PROCESSING, |l| {
        l.contains("worker started") && l.contains("threads=1")
    });
    let output = host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        r#"{"key": "ok@example.com"}"#,
        "--json",
    ]);
    let job_id = json_of(&output)["job_id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job completed")
    });
}

#[test]
fn a_thread_count_of_zero_or_beyond_the_limit_is_a_usage_error() {
    for threads in ["0", "513"] {
        let output = jobhost()
            .args(["run", "--threads", threads])
            .output()
            .expect("jobhost runs");
        assert_eq!(
            output.status.code(),
            Some(2),
            "`--threads {threads}` is refused with clap's usage exit code"
        );
    }
}

#[test]
fn a_failed_job_is_listed_with_its_exact_reason_and_replay_runs_it_again_as_attempt_one() {
    let host = Host::start(&["scripted"]);
    let payload = r#"{"key": "doomed", "fail_times": 1, "message": "database is down"}"#;
    let enqueued = json_of(&host.cli(&["enqueue", "scripted.BareJob", payload, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job dead-lettered")
    });

    let reason =
        "max attempts (1) exhausted after attempt 1: job failed (retryable): database is down";
    let listed = stdout_of(&host.cli(&["dead", "list", "test.bare"]));
    assert!(
        listed.contains(reason) && listed.contains(&job_id),
        "`dead list` shows the job and the exact reason; it printed:\n{listed}"
    );

    let seen = host.line_count();
    let replayed = stdout_of(&host.cli(&["dead", "replay", "test.bare"]));
    assert!(
        replayed.contains("replayed 1"),
        "one letter replayed; it printed:\n{replayed}"
    );
    let rerun = host.wait_for_line_after(seen, PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job dead-lettered")
    });
    assert!(
        rerun.contains("attempt=1"),
        "the replay runs attempt 1: {rerun}"
    );

    let listed = json_of(&host.cli(&["dead", "list", "test.bare", "--json"]));
    let letters = listed["letters"].as_array().expect("a list");
    assert_eq!(
        letters.len(),
        1,
        "the replayed job failed again and is the one dead letter"
    );
    assert_eq!(
        letters[0]["job_id"],
        job_id.as_str(),
        "a replay keeps the job id"
    );
    assert_eq!(letters[0]["reason"], reason);

    let purged = stdout_of(&host.cli(&["dead", "purge", "test.bare"]));
    assert!(
        purged.contains("purged 1"),
        "purge drops the letter; it printed:\n{purged}"
    );
}

#[test]
fn policy_prints_the_chapters_table_for_the_default_exponential_policy() {
    let host = Host::start(&["scripted"]);
    let printed = stdout_of(&host.cli(&["policy", "scripted.JitteredJob"]));
    let rows: Vec<(String, String)> = printed
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains("Failed attempt"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].to_owned(), cells[1].to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("1", "1s"),
        ("2", "2s"),
        ("3", "4s"),
        ("4", "8s"),
        ("5", "16s"),
        ("6", "32s"),
        ("7", "64s"),
        ("8", "128s"),
        ("9", "256s"),
        ("10 and later", "300s (the cap)"),
    ]
    .iter()
    .map(|(a, w)| ((*a).to_owned(), (*w).to_owned()))
    .collect();
    assert_eq!(
        rows, expected,
        "the chapter's table; the command printed:\n{printed}"
    );
    assert!(
        printed.contains("5 attempts"),
        "the policy's attempts are named:\n{printed}"
    );

    let unknown = host.cli(&["policy", "nobody.Serves"]);
    assert_eq!(
        unknown.status.code(),
        Some(1),
        "an unknown job type is a failed operation"
    );
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("no loaded plugin serves job type `nobody.Serves`")
    );
}

#[test]
fn plugins_lists_loaded_plugins_with_their_jobs_and_effective_policies() {
    let host = Host::start(&["scripted"]);
    let plugins = json_of(&host.cli(&["plugins", "--json"]));
    let jobs = plugins[0]["jobs"].as_array().expect("the plugin's jobs");
    let bare = jobs
        .iter()
        .find(|j| j["name"] == "scripted.BareJob")
        .expect("BareJob is listed");
    assert_eq!(
        bare["source"], "default",
        "a job on a queue without retry gets the default"
    );
    assert_eq!(bare["policy"]["max_attempts"], 1);
    let limited = jobs
        .iter()
        .find(|j| j["name"] == "scripted.LimitedJob")
        .expect("LimitedJob is listed");
    assert_eq!(
        limited["concurrency"],
        serde_json::json!({ "limit": 2, "key": "key", "from": "plugin scripted" }),
        "a cap the plugin declares is in force, and says where it comes from"
    );
    assert_eq!(limited["rate"]["limit"], "100/s");
    assert_eq!(limited["rate"]["burst"], 10);
    assert_eq!(
        limited["unique"],
        serde_json::json!({ "key": "key", "for_ms": 600_000 })
    );
    // Unique as declared: while the first `a` is held, a second `a` is refused, a `b` is not.
    let enqueue = |key: &str| {
        let payload = format!(r#"{{"key": "{key}"}}"#);
        host.cli(&["enqueue", "scripted.LimitedJob", &payload, "--delay", "10m"])
    };
    stdout_of(&enqueue("a"));
    let duplicate = enqueue("a");
    assert!(!duplicate.status.success(), "a second `a` is refused");
    let refused = String::from_utf8_lossy(&duplicate.stderr);
    assert!(
        refused.contains("duplicate") || refused.contains("unique"),
        "{refused}"
    );
    stdout_of(&enqueue("b"));
    let table = stdout_of(&host.cli(&["plugins"]));
    assert!(
        table.contains("scripted.PatientEmail") && table.contains("5 attempts, fixed 3s"),
        "{table}"
    );
    assert!(
        table.contains("2 at once per key (plugin scripted)"),
        "{table}"
    );
}

#[test]
fn sigint_stops_run_cleanly_with_exit_code_zero() {
    let mut host = Host::start(&["noop"]);
    let status = host.interrupt(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "Ctrl-C is a clean shutdown");
    host.wait_for_line(Duration::from_secs(5), |l| l.contains("host stopped"));
}

/// The default load deadline is 10 s; the host must exit well before the load of a plugin
/// whose `manifest` spins would end. A spinning guest, because runtime shutdown would
/// itself cut a sleeping one short.
#[test]
fn sigint_during_a_hanging_plugin_load_exits_without_waiting_for_it() {
    let mut host = Host::start(&["noop"]);
    host.wait_for_line(STARTUP, |l| l.contains("watching the plugin directory"));
    let staged = host.plugin_dir().join("slow.staged");
    std::fs::copy(jobhost_fixtures::wasm("slow-manifest"), &staged).expect("the fixture is staged");
    std::fs::rename(&staged, host.plugin_dir().join("slow.wasm")).expect("renamed into place");
    // A plugin's compiled artifact is cached before its manifest is called: once the
    // hanging plugin's is there, its load has reached the manifest (or is about to).
    let wasm = std::fs::read(jobhost_fixtures::wasm("slow-manifest")).expect("the fixture reads");
    let hash: String = Sha256::digest(&wasm)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache/jobhost");
    let compiled = || {
        std::fs::read_dir(&cache).is_ok_and(|entries| {
            entries
                .filter_map(Result::ok)
                .any(|entry| entry.file_name().to_string_lossy().starts_with(&hash))
        })
    };
    let deadline = Instant::now() + STARTUP;
    while !compiled() {
        assert!(Instant::now() < deadline, "the hanging plugin is compiled");
        std::thread::sleep(Duration::from_millis(50));
    }

    let stopping = Instant::now();
    let status = host.interrupt(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "Ctrl-C is a clean shutdown");
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "exited after {:?}",
        stopping.elapsed()
    );
}

#[test]
fn client_commands_without_a_host_exit_3_and_say_how_to_start_one() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = free.local_addr().expect("its address").to_string();
    drop(free);
    let output = jobhost()
        .args(["plugins", "--admin", &addr])
        .output()
        .expect("jobhost runs");
    assert_eq!(output.status.code(), Some(3), "an unreachable host exits 3");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is `jobhost run` running?"),
        "the error says what to do:\n{stderr}"
    );
}

#[test]
fn a_payload_that_is_not_json_is_a_usage_error() {
    let output = jobhost()
        .args(["enqueue", "scripted.SendEmail", "{not json"])
        .output()
        .expect("jobhost runs");
    assert_eq!(output.status.code(), Some(2), "clap's usage exit code");
}

#[test]
fn an_unreachable_broker_exits_3_without_showing_the_password() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    let refused = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = refused.local_addr().expect("its address").port();
    drop(refused);
    let url = format!("amqp://guest:hunter2@127.0.0.1:{port}/%2f");
    let output = jobhost()
        .args(["run", "--admin", "127.0.0.1:0", "--amqp", &url, "--plugins"])
        .arg(dir.path())
        .output()
        .expect("jobhost runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "an unreachable broker exits 3:\n{stderr}"
    );
    assert!(
        stderr.contains("is RabbitMQ running"),
        "the error says what to do:\n{stderr}"
    );
    assert!(
        !stderr.contains("hunter2"),
        "the password never reaches the output:\n{stderr}"
    );
}

#[test]
fn a_failing_command_prints_each_cause_once() {
    let missing = tempfile::tempdir()
        .expect("a temp directory")
        .path()
        .join("nowhere");
    let output = jobhost()
        .args(["build", "--plugins"])
        .arg(&missing)
        .output()
        .expect("jobhost runs");
    assert_eq!(output.status.code(), Some(1), "a failed operation exits 1");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "the cause is printed once:\n{stderr}"
    );
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn an_enqueued_job_joins_the_trace_its_traceparent_names_and_its_log_lines_say_so() {
    let host = Host::start(&["scripted"]);
    let payload = r#"{"key": "traced@example.com"}"#;
    let output = host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        payload,
        "--traceparent",
        TRACEPARENT,
    ]);
    let said = stdout_of(&output);
    assert!(
        said.contains(", trace 4bf92f3577b34da6a3ce929d0e0e4736"),
        "enqueue names the trace: {said}"
    );
    let line = host.wait_for_line(PROCESSING, |l| {
        l.contains("scripted call") && l.contains("traced@example.com")
    });
    assert!(
        line.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
        "the job's log line carries its trace: {line}"
    );
}

#[test]
fn an_enqueued_job_without_a_traceparent_starts_a_trace_of_its_own() {
    let host = Host::start(&["scripted"]);
    let enqueued = json_of(&host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        r#"{"key": "untraced@example.com"}"#,
        "--json",
    ]));
    let trace_id = enqueued["trace_id"]
        .as_str()
        .expect("a trace id")
        .to_owned();
    assert_eq!(trace_id.len(), 32, "a W3C trace id: {trace_id}");
    host.wait_for_line(PROCESSING, |l| {
        l.contains("untraced@example.com") && l.contains(&format!("trace_id={trace_id}"))
    });
}

#[test]
fn a_malformed_traceparent_is_a_usage_error_that_shows_the_expected_form() {
    let output = jobhost()
        .args([
            "enqueue",
            "scripted.SendEmail",
            "{}",
            "--traceparent",
            "00-XYZ",
        ])
        .output()
        .expect("the client runs");
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not a W3C traceparent: `00-{32 hex}-{16 hex}-{2 hex}`"),
        "{stderr}"
    );
}

/// Whether `line` holds 64 hex digits in a row: the length of the admin token and of
/// every login or session secret.
fn holds_a_secret(line: &str) -> bool {
    let mut run = 0;
    for c in line.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        if run >= 64 {
            return true;
        }
    }
    false
}

#[test]
fn the_log_holds_no_credential_and_jobhost_dashboard_prints_a_link_that_signs_in() {
    let host = Host::start(&["scripted"]);
    let token_file = host.token_file();
    let token = host.token();
    assert!(
        token_file.is_absolute() && token_file.exists(),
        "the log names the token file: {}",
        token_file.display()
    );

    let output = host.cli(&["dashboard"]);
    let link = stdout_of(&output).trim().to_owned();
    let prefix = format!("http://{}/?login=", host.admin);
    assert!(link.starts_with(&prefix), "a link to this host: {link}");
    assert_ne!(&link[prefix.len()..], token, "the link is not the token");

    let path = link.split_once(&host.admin).expect("the address").1;
    let signed_in = http_get(&host.admin, path, &[]);
    assert!(signed_in.starts_with("HTTP/1.1 303"), "{signed_in}");
    let port = host.admin.rsplit(':').next().expect("a port");
    let cookie = signed_in
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("the link signs in: {signed_in}"));
    assert!(
        cookie.starts_with(&format!("jobhost_session_{port}=")),
        "the cookie's name carries the port: {cookie}"
    );
    let overview = http_get(
        &host.admin,
        "/api/overview",
        &[&format!("Cookie: {cookie}")],
    );
    assert!(
        overview.starts_with("HTTP/1.1 200"),
        "the session reads: {overview}"
    );
    for path in ["/api/overview", "/dead/test.emails", "/plugins"] {
        let anonymous = http_get(&host.admin, path, &[]);
        assert!(
            anonymous.starts_with("HTTP/1.1 401"),
            "`{path}` without a session: {anonymous}"
        );
    }
    let used = http_get(&host.admin, path, &[]);
    assert!(!used.contains("set-cookie"), "the link works once: {used}");
    host.wait_for_line(PROCESSING, |l| l.contains("a browser signed in"));

    let log = host.log_lines();
    let file = token_file.display().to_string();
    assert!(
        log.iter().any(|l| l.contains(&file)),
        "the log names the token file"
    );
    let login = &link[prefix.len()..];
    let session = cookie.split_once('=').expect("name=value").1;
    for line in &log {
        for secret in [token.as_str(), login, session] {
            assert!(!line.contains(secret), "a credential is logged: {line}");
        }
        assert!(!holds_a_secret(line), "a secret is logged: {line}");
        assert!(
            !line.contains("?login=") && !line.contains("?token="),
            "a login link is logged: {line}"
        );
    }
}

#[test]
fn jobhost_dashboard_without_a_running_host_says_where_it_looked_for_the_token() {
    let missing = tempfile::tempdir().expect("a temp directory");
    let file = missing.path().join("no.token");
    let output = jobhost()
        .args(["dashboard", "--admin", "127.0.0.1:1", "--admin-token-file"])
        .arg(&file)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&file.display().to_string()) && stderr.contains("jobhost run"),
        "the error names the file and the host: {stderr}"
    );
    assert!(output.stdout.is_empty(), "no link");
}

/// 8 GiB: the sparse file of the measurement that took a host from 44 MiB to 2.8 GiB.
const SPARSE_BYTES: u64 = 8 << 30;

#[test]
fn a_sparse_8_gib_plugin_is_refused_unread_and_the_host_stays_near_its_idle_memory() {
    let host = Host::start(&["noop"]);
    host.wait_for_line(STARTUP, |l| l.contains("watching the plugin directory"));
    let idle = host.rss_kib();
    let before = host.line_count();
    // As `truncate -s 8G plugins/big.wasm` does it: created, then grown in place.
    sparse_file(&host.plugin_dir().join("big.wasm"), SPARSE_BYTES);
    let refused = host.wait_for_line_after(before, PROCESSING, |l| {
        l.contains("plugin refused") && l.contains("big.wasm")
    });
    assert!(
        refused.contains(
            "it holds 8589934592 bytes, more than the 67108864 bytes a plugin may hold \
             (`--max-plugin-size`)"
        ),
        "the refusal names the file and the rule: {refused}"
    );
    let after = host.rss_kib();
    eprintln!("VmRSS idle {idle} KiB, after the 8 GiB plugin was refused {after} KiB");
    assert!(
        after < idle + 64 * 1024,
        "the file was not read: VmRSS went from {idle} KiB to {after} KiB"
    );

    // Over a serving plugin, by rename: refused, and the loaded version keeps serving.
    let before = host.line_count();
    let staged = host.plugin_dir().join("noop.staged");
    sparse_file(&staged, SPARSE_BYTES);
    std::fs::rename(&staged, host.plugin_dir().join("noop.wasm")).expect("renamed into place");
    let kept = host.wait_for_line_after(before, PROCESSING, |l| {
        l.contains("the previous version keeps serving")
    });
    assert!(
        kept.contains("noop.wasm") && kept.contains("--max-plugin-size"),
        "{kept}"
    );
    let plugins = json_of(&host.cli(&["plugins", "--json"]));
    assert_eq!(plugins.as_array().map(Vec::len), Some(1), "{plugins}");
}

#[test]
fn plugin_files_that_are_fifos_or_link_to_one_or_to_a_file_over_the_cap_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    let elsewhere = tempfile::tempdir().expect("a directory outside the plugin directory");
    std::fs::copy(jobhost_fixtures::wasm("noop"), dir.path().join("noop.wasm"))
        .expect("the fixture copies into the plugin directory");
    mkfifo(&dir.path().join("fifo.wasm"));
    let fifo = elsewhere.path().join("fifo");
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, dir.path().join("to-fifo.wasm")).expect("a link");
    let big = elsewhere.path().join("big");
    sparse_file(&big, SPARSE_BYTES);
    std::os::unix::fs::symlink(&big, dir.path().join("to-big.wasm")).expect("a link");
    let mut command = jobhost();
    command
        .args(["run", "--max-plugin-size", "100MiB", "--plugins"])
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    host.wait_for_line(STARTUP, |l| {
        l.contains("plugins loaded") && l.contains("loaded=1")
    });
    let refusal = |file: &str| {
        host.wait_for_line(PROCESSING, |l| {
            l.contains("plugin refused") && l.contains(file)
        })
    };
    let fifo_rule = "it is a FIFO, not a regular file; the host reads only regular files";
    let own = refusal("/fifo.wasm`");
    assert!(own.contains(fifo_rule), "{own}");
    let fifo = std::fs::canonicalize(&fifo).expect("the FIFO's path");
    let linked = refusal("to-fifo.wasm");
    assert!(
        linked.contains(&format!("it links to `{}`: {fifo_rule}", fifo.display())),
        "{linked}"
    );
    let big = std::fs::canonicalize(&big).expect("the big file's path");
    let linked = refusal("to-big.wasm");
    assert!(
        linked.contains(&format!(
            "it links to `{}`: it holds 8589934592 bytes, more than the 104857600 bytes a \
             plugin may hold",
            big.display()
        )),
        "{linked}"
    );
}

#[test]
fn a_queue_paused_with_the_cli_holds_its_jobs_until_resumed_and_a_cancelled_one_never_runs() {
    let host = Host::start(&["scripted"]);
    host.wait_for_line(STARTUP, |l| {
        l.contains("consuming") && l.contains("queue=test.emails ")
    });
    let paused = stdout_of(&host.cli(&["queue", "pause", "test.emails", "--by", "ops@test"]));
    assert!(
        paused.starts_with("paused test.emails for the fleet (by ops@test, at "),
        "{paused}"
    );
    host.wait_for_line(PROCESSING, |l| {
        l.contains("stopped consuming the paused queue") && l.contains("test.emails")
    });
    let enqueue = |key: &str| {
        let payload = format!(r#"{{"key": "{key}"}}"#);
        let output = host.cli(&["enqueue", "scripted.SendEmail", &payload, "--json"]);
        json_of(&output)["job_id"]
            .as_str()
            .expect("a job id")
            .to_owned()
    };
    let kept = enqueue("kept@example.com");
    let doomed = enqueue("doomed@example.com");
    let cancelled = stdout_of(&host.cli(&["job", "cancel", &doomed, "--by", "ops@test"]));
    assert!(
        cancelled.starts_with(&format!("cancelled job {doomed} (by ops@test, at ")),
        "{cancelled}"
    );

    let resumed_at = host.line_count();
    stdout_of(&host.cli(&["queue", "resume", "test.emails"]));
    host.wait_for_line_after(resumed_at, PROCESSING, |l| {
        l.contains(logged_id(&kept)) && l.contains("job completed")
    });
    host.wait_for_line_after(resumed_at, PROCESSING, |l| {
        l.contains(logged_id(&doomed)) && l.contains("job cancelled")
    });
    let log = host.log_lines();
    assert!(
        !log[..resumed_at]
            .iter()
            .any(|l| l.contains("scripted call")),
        "nothing ran while paused"
    );
    assert!(
        !log.iter().any(|l| l.contains("doomed@example.com")),
        "the cancelled job never ran"
    );
    let listed = stdout_of(&host.cli(&["dead", "list", "test.emails"]));
    assert!(
        listed.contains(&doomed) && listed.contains("cancelled by ops@test at "),
        "`dead list` shows who cancelled it and when:\n{listed}"
    );
}

#[test]
fn a_job_id_that_is_not_a_uuid_or_a_by_with_control_characters_is_refused_before_anything_is_sent()
{
    let output = jobhost()
        .args(["job", "cancel", "not-a-uuid"])
        .output()
        .expect("jobhost runs");
    assert_eq!(output.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not a job id"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = jobhost()
        .args([
            "queue",
            "pause",
            "q",
            "--by",
            "eve\u{1b}[2J",
            "--admin",
            "127.0.0.1:9",
        ])
        .output()
        .expect("jobhost runs");
    assert_eq!(output.status.code(), Some(1), "refused, not sent");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("`--by` is refused"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
