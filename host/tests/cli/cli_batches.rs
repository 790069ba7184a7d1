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
    let deadline = Instant::now() + PROCESSING + Duration::from_secs(10);
    let view = loop {
        let listed = json_of(&host.cli(&["batches", &batch.to_string(), "--json"]));
        let view = listed[0].clone();
        let fired = |name: &str| {
            view["callbacks"]
                .as_array()
                .expect("callbacks")
                .iter()
                .any(|c| c["callback"] == name && c["fired"].is_string())
        };
        if view["pending"] == 0 && fired("on_death") && fired("on_complete") {
            break view;
        }
        assert!(Instant::now() < deadline, "the batch did not end: {view}");
        std::thread::sleep(Duration::from_millis(200));
    };
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
    let deadline = Instant::now() + PROCESSING;
    let letters = loop {
        let listed = json_of(&host.cli(&["dead", "list", "test.ledger.done", "--json"]));
        let letters: Vec<String> = listed["letters"]
            .as_array()
            .expect("letters")
            .iter()
            .filter_map(|l| l["job_id"].as_str().map(str::to_owned))
            .collect();
        if letters.contains(&on_complete.to_string()) && letters.contains(&on_death.to_string()) {
            break letters;
        }
        assert!(Instant::now() < deadline, "the callbacks ran: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let once = |id: Uuid| letters.iter().filter(|l| **l == id.to_string()).count();
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
    let deadline = Instant::now() + PROCESSING;
    let view = loop {
        let listed = host.cli(&["batches", &batch.to_string(), "--json"]);
        if listed.status.success() {
            let view = json_of(&listed)[0].clone();
            let fired = |name: &str| {
                view["callbacks"]
                    .as_array()
                    .expect("callbacks")
                    .iter()
                    .any(|c| c["callback"] == name && c["fired"].is_string())
            };
            if view["pending"] == 0 && fired("on_success") && fired("on_complete") {
                break view;
            }
        }
        assert!(Instant::now() < deadline, "the fan's batch did not end");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        (&view["total"], &view["completed"], &view["dead"]),
        (&5.into(), &5.into(), &0.into()),
        "three members and the two the first added: {view}"
    );
    let deadline = Instant::now() + PROCESSING;
    loop {
        let listed = json_of(&host.cli(&["dead", "list", "test.ledger.done", "--json"]));
        let letters: Vec<String> = listed["letters"]
            .as_array()
            .expect("letters")
            .iter()
            .filter_map(|l| l["job_id"].as_str().map(str::to_owned))
            .collect();
        let count = |callback| {
            let id = callback_job_id(batch, callback).to_string();
            letters.iter().filter(|l| **l == id).count()
        };
        // Five member records, and each callback's job once.
        if letters.len() >= 7 {
            assert_eq!(
                (count(Callback::OnSuccess), count(Callback::OnComplete)),
                (1, 1),
                "{listed}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the records came: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
