//! `jobhost enqueue --batch` and `jobhost batches` on the memory backend, as a user types
//! them: a batch of `ledger.Work` jobs whose callbacks are `ledger.Done`, which the
//! `ledger` fixture dead-letters at once, so `jobhost dead list` shows which fired.

use std::time::{Duration, Instant};

use jobhost::batches::callback_job_id;
use jobhost::broker::Callback;
use uuid::Uuid;

use crate::support::cli::{Host, PROCESSING, json_of, stdout_of};

#[test]
fn a_batch_enqueued_from_the_cli_fires_on_death_and_on_complete_once_and_shows_its_progress() {
    let host = Host::start(&["ledger"]);
    let enqueued = stdout_of(&host.cli(&[
        "enqueue",
        "--batch",
        "ledger.Work",
        r#"[{"id": 1}, {"id": 2}, {"id": 3, "fail_times": 5}]"#,
        "--on-success",
        "ledger.Done",
        "--on-complete",
        "ledger.Done",
        "--on-death",
        "ledger.Done",
        "--context",
        r#"{"day": "2026-12-07"}"#,
    ]));
    assert!(
        enqueued.starts_with("enqueued 3 ledger.Work jobs as batch "),
        "{enqueued}"
    );
    let batch: Uuid = enqueued
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|id| id.parse().ok())
        .expect("the batch id ends the line");

    // The job that fails five attempts, a second apart, is dead-lettered last.
    let view = ended(
        &host,
        batch,
        &["on_death", "on_complete"],
        PROCESSING + Duration::from_secs(10),
    );
    assert_eq!(
        (&view["total"], &view["completed"], &view["dead"]),
        (&3.into(), &2.into(), &1.into()),
        "{view}"
    );

    let table = stdout_of(&host.cli(&["batches"]));
    let on_death = callback_job_id(batch, Callback::OnDeath);
    assert!(
        table.contains(&batch.to_string())
            && table.contains(&format!("on_death ledger.Done (fired as {on_death})"))
            && table.contains("on_success ledger.Done (not fired)"),
        "{table}"
    );
    // The callbacks' jobs, beside the members' records, in the done queue's dead letters.
    let on_complete = callback_job_id(batch, Callback::OnComplete);
    let letters = records(&host, |letters| {
        letters.contains(&on_complete) && letters.contains(&on_death)
    });
    let once = |id: Uuid| letters.iter().filter(|l| **l == id).count();
    assert_eq!((once(on_death), once(on_complete)), (1, 1), "{letters:?}");
    assert_eq!(once(callback_job_id(batch, Callback::OnSuccess)), 0);
}

#[test]
fn a_batch_naming_a_job_type_no_plugin_serves_is_refused_whole() {
    let host = Host::start(&["ledger"]);
    let output = host.cli(&[
        "enqueue",
        "--batch",
        "ledger.Work",
        r#"[{"id": 1}]"#,
        "--on-success",
        "nobody.Serves",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no loaded plugin serves `nobody.Serves`"),
        "{stderr}"
    );
    let listed = stdout_of(&host.cli(&["batches"]));
    assert!(listed.starts_with("no batch"), "{listed}");
}

#[test]
fn the_readmes_campaign_batch_reports_once_what_it_sent_and_dead_lettered() {
    let host = Host::start(&["email-sender"]);
    let emails = r#"[{"to": "ada@example.com", "subject": "Hi", "body": "Welcome"}, {"to": "bob-at-example.com", "subject": "Hi", "body": "Welcome"}]"#;
    let enqueued = stdout_of(&host.cli(&[
        "enqueue",
        "--batch",
        "email.SendEmail",
        emails,
        "--on-complete",
        "email.CampaignReport",
        "--context",
        r#"{"campaign": "welcome"}"#,
    ]));
    assert!(
        enqueued.starts_with("enqueued 2 email.SendEmail jobs as batch "),
        "{enqueued}"
    );
    let report = host.wait_for_line(PROCESSING, |l| l.contains("campaign finished"));
    assert!(
        report
            .contains(r#"campaign finished campaign="welcome" sent="1" dead_lettered="1" of="2""#),
        "{report}"
    );
    let listed = stdout_of(&host.cli(&["batches"]));
    assert!(
        listed.contains("on_complete email.CampaignReport (fired as "),
        "{listed}"
    );
    let reports = host
        .log_lines()
        .iter()
        .filter(|l| l.contains("campaign finished"))
        .count();
    assert_eq!(reports, 1, "the callback ran once");
}

#[test]
fn a_handler_fans_out_a_batch_whose_member_adds_to_it_and_the_fleet_gathers_it_once() {
    let host = Host::start(&["ledger"]);
    let enqueued = json_of(&host.cli(&[
        "enqueue",
        "ledger.Fan",
        r#"{"ids": [1, 2, 3], "nested": [4, 5]}"#,
        "--json",
    ]));
    let fan: Uuid = enqueued["job_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .expect("the fan's job id");
    // The batch's id is derived from the fan's, so a fan run twice opens it once.
    let batch = jobhost::job::batch::opened_batch_id(fan, 0);
    let view = ended(&host, batch, &["on_success", "on_complete"], PROCESSING);
    assert_eq!(
        (&view["total"], &view["completed"], &view["dead"]),
        (&5.into(), &5.into(), &0.into()),
        "three members and the two the first added: {view}"
    );
    // Five member records, and each callback's job once.
    let letters = records(&host, |letters| letters.len() >= 7);
    let once = |callback| {
        let id = callback_job_id(batch, callback);
        letters.iter().filter(|l| **l == id).count()
    };
    assert_eq!(
        (once(Callback::OnSuccess), once(Callback::OnComplete)),
        (1, 1),
        "{letters:?}"
    );
}

/// `jobhost batches BATCH --json` once none of `batch`'s members is pending and each of
/// `callbacks` fired, failing after `limit`.
fn ended(host: &Host, batch: Uuid, callbacks: &[&str], limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let listed = host.cli(&["batches", &batch.to_string(), "--json"]);
        // Refused until the host has read the batch's opening.
        let view = if listed.status.success() {
            json_of(&listed)[0].clone()
        } else {
            serde_json::Value::Null
        };
        let fired = |name: &&str| {
            view["callbacks"].as_array().is_some_and(|all| {
                all.iter()
                    .any(|c| c["callback"] == *name && c["fired"].is_string())
            })
        };
        if view["pending"] == 0 && callbacks.iter().all(fired) {
            return view;
        }
        assert!(Instant::now() < deadline, "the batch did not end: {view}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The job ids of the `ledger` fixture's records (`test.ledger.done`'s dead letters) once
/// `enough` holds of them, failing after [`PROCESSING`].
fn records(host: &Host, enough: impl Fn(&[Uuid]) -> bool) -> Vec<Uuid> {
    let deadline = Instant::now() + PROCESSING;
    loop {
        let listed = json_of(&host.cli(&["dead", "list", "test.ledger.done", "--json"]));
        let letters: Vec<Uuid> = listed["letters"]
            .as_array()
            .expect("letters")
            .iter()
            .filter_map(|l| l["job_id"].as_str()?.parse().ok())
            .collect();
        if enough(&letters) {
            return letters;
        }
        assert!(Instant::now() < deadline, "the records came: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
