//! `jobhost replay` as a user types it (docs/replay.md): a job that failed on a payment
//! service's `500` is replayed from the running host's recording with the service gone,
//! to the same reason and log lines; saved to a file and replayed offline against the fixed
//! version, which now completes; and a queue's dead letters replayed against a version that
//! calls another URL, reported as diverged at that call. No recording holds the secret.

use crate::support::cli::{Host, PROCESSING, jobhost, json_of, logged_id, stdout_of};
use crate::support::payments::{ALREADY, API_KEY, Service, workspace};

#[test]
fn a_dead_job_replays_offline_and_a_fix_is_checked_against_the_recorded_failures() {
    let service = Service::start();
    let origin = service.origin.clone();
    let dir = workspace(&origin);
    let work = dir.path().to_owned();
    let host = Host::in_project(dir, &[]);

    let payload = format!(r#"{{"url": "{origin}", "order": "o-17"}}"#);
    let enqueued = json_of(&host.cli(&["enqueue", "replay.Charge", &payload, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job dead-lettered")
    });
    let recorded_nonce = host
        .wait_for_line(PROCESSING, |l| {
            l.contains("charging") && l.contains("nonce=")
        })
        .split("nonce=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the log shows the nonce")
        .to_owned();
    service.stop();

    // The recorded version, found in plugins/ by its digest, with the service gone.
    let replayed = host.cli_ok_in(&work, &["replay", &job_id, "--trace"]);
    assert!(
        replayed.contains("(the recorded version)")
            && replayed.contains("verdict: still fails, same reason")
            && replayed.contains(ALREADY)
            && replayed.contains("log: 2 lines, as recorded")
            && replayed.contains(&recorded_nonce),
        "the replay gives the recorded reason and log lines; it printed:\n{replayed}"
    );
    assert!(
        replayed.contains(&format!("http POST {origin}/charge?order=o-17 -> 500")),
        "--trace shows the request with its recorded answer:\n{replayed}"
    );
    assert!(!replayed.contains(API_KEY), "no secret in a replay");
    let first = host.cli_ok_in(&work, &["replay", &job_id, "--attempt", "1", "--json"]);
    let first: serde_json::Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(
        (first["attempt"].as_u64(), first["same_log"].as_bool()),
        (Some(1), Some(true)),
        "{first}"
    );
    let missing = host.cli(&["replay", &job_id, "--attempt", "2"]);
    assert!(!missing.status.success());
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains(&format!(
            "no recording of attempt 2 of job {job_id}; kept: attempt 1"
        )),
        "{said}"
    );

    // Saved, then replayed offline from the file against the fixed version.
    let saved = host.cli_ok_in(&work, &["replay", &job_id, "--save", "charge.json"]);
    assert!(saved.contains("saved to charge.json"), "{saved}");
    let file = std::fs::read_to_string(work.join("charge.json")).expect("the saved recording");
    assert!(
        !file.contains(API_KEY),
        "the recording holds the secret by name only"
    );
    let fixed = jobhost()
        .current_dir(&work)
        .args([
            "replay",
            "--file",
            "charge.json",
            "--plugin",
            "replayable-fixed.wasm",
        ])
        .output()
        .expect("the client runs");
    let fixed = stdout_of(&fixed);
    assert!(
        fixed.contains("verdict: now completes") && fixed.contains("not the recorded version"),
        "the fixed version completes the recorded attempt; it printed:\n{fixed}"
    );

    // The queue's dead letters against a version that calls another URL.
    let table = host.cli_ok_in(
        &work,
        &[
            "replay",
            "--queue",
            "test.replayable.dead",
            "--plugin",
            "replayable-moved.wasm",
        ],
    );
    assert!(
        table.contains("1 dead letters of test.replayable")
            && table.contains(&job_id)
            && table.contains("diverged")
            && table.contains(&format!("{origin}/v2/charge")),
        "the table reports the divergence at the changed call; it printed:\n{table}"
    );
    let fixed_table = host.cli_ok_in(
        &work,
        &[
            "replay",
            "--queue",
            "test.replayable",
            "--plugin",
            "replayable-fixed.wasm",
            "--json",
        ],
    );
    let rows: serde_json::Value = serde_json::from_str(&fixed_table).expect("JSON");
    assert_eq!(rows[0]["verdict"], "now completes", "{fixed_table}");
}

#[test]
fn replay_of_a_job_with_no_recording_says_why_and_exits_non_zero() {
    let host = Host::start(&["replayable"]);
    let output = host.cli(&["replay", "6f1d4c9e-0b7a-4c1e-9a55-3f0c2d1e8b7a"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no recording of job 6f1d4c9e-0b7a-4c1e-9a55-3f0c2d1e8b7a is kept"),
        "{stderr}"
    );
}

#[test]
fn a_new_version_on_probation_that_fails_its_share_is_rolled_back_and_the_old_one_serves() {
    let dir = tempfile::tempdir().expect("a temp directory");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("the plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("versioned"),
        plugins.join("versioned.wasm"),
    )
    .expect("v1 copies");
    crate::support::cli::write_grants(
        &dir.path().join("jobhost.toml"),
        "[plugins.versioned]\nprobation = { share = 0.5, min_jobs = 4, margin = 0.1, window = \"1h\" }\n",
    );
    let work = dir.path().to_owned();
    let host = Host::in_project(dir, &[]);
    let v1 = json_of(&host.cli(&["plugins", "--json"]))[0]["version"]
        .as_str()
        .expect("a version")
        .to_owned();

    // v2 says no to every first and second attempt: it fails its whole share.
    let staged = work.join("versioned.staged");
    std::fs::copy(jobhost_fixtures::wasm("versioned-v2"), &staged).expect("v2 copies");
    std::fs::rename(&staged, plugins.join("versioned.wasm")).expect("v2 replaces v1's file");
    host.wait_for_line(PROCESSING, |l| {
        l.contains("on probation beside the old one")
    });
    let listed = stdout_of(&host.cli(&["plugins"]));
    assert!(
        listed.contains(&format!("on probation: version {v1} serves the rest")),
        "{listed}"
    );

    for n in 0..16 {
        host.cli(&[
            "enqueue",
            "versioned.Echo",
            &format!(r#"{{"message": "m{n}"}}"#),
        ]);
    }
    let verdict = host.wait_for_line(PROCESSING, |l| l.contains("rolled back"));
    assert!(
        verdict.contains("failed 100% of 4 attempts"),
        "the verdict says why: {verdict}"
    );
    let serving = json_of(&host.cli(&["plugins", "--json"]));
    assert_eq!(
        serving[0]["version"],
        v1.as_str(),
        "v1 serves everything again"
    );
    assert!(serving[0].get("on_probation_against").is_none());
}
