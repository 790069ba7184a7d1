//! The dashboard in headless Chromium against `jobhost run` on RabbitMQ, signed in through
//! `jobhost dashboard --open` (its redirect file, handed to the browser by a stand-in
//! `xdg-open`): a scenario of
//! jobs that succeed, retry and dead-letter by two causes shows its queues, plugin
//! versions and dead letters; replaying one dead letter from the page puts it back on its
//! queue, where it completes; swapping a plugin file shows the reload in the plugin's
//! history without reloading the page; and a queue's Pause button pauses it for the fleet
//! (the host stops consuming it, the row says `paused`) until its Resume button, while a
//! job queued there and cancelled from the page is dead-lettered unrun, by `dashboard`; a
//! campaign's batch, opened with `jobhost enqueue --batch`, shows its progress and its
//! report once fired. Each state is saved as a screenshot under
//! `target/dashboard-screenshots/` for review.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them) and the test
//! broker; `JOBHOST_SKIP_BROWSER_TESTS=1` and `JOBHOST_SKIP_BROKER_TESTS=1` skip it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use jobhost::batches::{callback_job_id, firing_lock};
use jobhost::broker::{
    Callback, Permits, endings_queue_name, history_queue_name, paused_marker_name,
};
use jobhost::worker::WorkerConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::browser;
use crate::support::browser::{Browser, LAPTOP};
use crate::support::cli::{Host, jobhost, stdout_of, write_grants};
use crate::support::worker::{eventually, fixture_queues, publish};
use crate::support::{Cleanup, amqp_url, backend, unique};

const EMAILS: &str = "examples.emails";
const VERSIONED: &str = "test.versioned";
/// How long the host may take to load, run and settle what the test waits for.
const PATIENCE: Duration = Duration::from_secs(60);

/// `GET path` of the admin API at `addr` as the holder of `token`, the body.
async fn get(addr: &str, token: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .expect("an HTTP answer")
}

/// Deploy `fixture` as `dir/versioned.wasm` by atomic rename, as docs/cli.md says
/// ("Deploying a plugin").
fn deploy(dir: &Path, fixture: &str) {
    let staged = dir.join(".versioned.wasm.tmp");
    std::fs::copy(jobhost_fixtures::wasm(fixture), &staged).expect("stage");
    std::fs::rename(&staged, dir.join("versioned.wasm")).expect("rename into place");
}

/// The short version the page shows of the plugin in `file`, from `GET /plugins`.
async fn version_of(host: &Host, file: &str) -> String {
    let body = get(&host.admin, &host.token(), "/plugins").await;
    let plugins: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let version = plugins
        .as_array()
        .expect("a list")
        .iter()
        .find(|p| p["file"].as_str().is_some_and(|f| f.ends_with(file)))
        .and_then(|p| p["version"].as_str())
        .unwrap_or_else(|| panic!("`{file}` is loaded: {plugins}"));
    version.chars().take(12).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_scenario_replays_a_dead_letter_and_follows_a_reload_live() {
    if !browser::available() {
        return;
    }
    let _cleanup = fixture_queues(&[EMAILS, VERSIONED]).await;
    let _mark = Cleanup::new(&[&paused_marker_name(VERSIONED)]);
    // The permit queue of the grants file's cap below, and the histories of its schedule
    // and of the one `email-sender` declares, which the page reads.
    let held_at_most = WorkerConfig::default().broker_consumer_timeout;
    let permits = Permits::for_queue(EMAILS, 8, held_at_most);
    let _limits = Cleanup::new(&[
        &permits.name,
        &history_queue_name("nightly"),
        &endings_queue_name("nightly"),
        &history_queue_name("email.DailyDigest"),
        &endings_queue_name("email.DailyDigest"),
    ]);
    let Some(producer) = backend(&unique("dashboard")).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("email-sender"),
        dir.path().join("email-sender.wasm"),
    )
    .expect("copy");
    deploy(dir.path(), "versioned");
    // A cap that never binds and a schedule that does not fire during the test, for the
    // page to show.
    let config = tempfile::tempdir().expect("a directory for the grants file");
    let grants_file = config.path().join("jobhost.toml");
    write_grants(
        &grants_file,
        "[queues.\"examples.emails\"]\nconcurrency = 8\n\n\
         [schedules.\"nightly\"]\njob_type = \"email.SendEmail\"\ncron = \"0 3 * * *\"\ntz = \"Europe/Paris\"\n",
    );
    let mut command = jobhost();
    command
        .args(["run", "--amqp", &amqp_url(), "--plugins"])
        .arg(dir.path())
        .arg("--config")
        .arg(&grants_file);
    let host = Host::spawn(command, dir, PATIENCE);
    for queue in [EMAILS, VERSIONED] {
        let consuming = format!("queue={queue} ");
        host.wait_for_line(PATIENCE, |l| {
            l.contains("consuming") && l.contains(&consuming)
        });
    }
    let opener = tempfile::tempdir().expect("a directory for xdg-open");
    let opened = opener.path().join("opened");
    let script = opener.path().join("xdg-open");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", opened.display()),
    )
    .expect("writes the stand-in");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        opener.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = jobhost()
        .env("PATH", path)
        .args(["dashboard", "--open", "--admin", &host.admin])
        .output()
        .expect("jobhost dashboard runs");
    let link = stdout_of(&output);
    let page = std::fs::read_to_string(&opened).expect("xdg-open was given a file");
    assert!(
        !page.contains("login="),
        "the link is not on xdg-open's command line: {page}"
    );
    assert!(
        std::fs::read_to_string(&page)
            .expect("the redirect file")
            .contains(link.trim()),
        "the redirect file leads to the link"
    );
    let login = format!("file://{page}");

    // The scenario: two sent, one sent after retries, one fatal, one out of attempts.
    for to in [
        "alice@example.com",
        "bob@example.com",
        "flaky@example.com",
        "no-at-sign",
    ] {
        let email = json!({"to": to, "subject": "hello", "body": "hi there"});
        publish(&producer, "email.SendEmail", EMAILS, email).await;
    }
    let doomed = publish(
        &producer,
        "versioned.Echo",
        VERSIONED,
        json!({"message": "m", "fail_times": 2}),
    )
    .await;
    let doomed = doomed.job_id.to_string();

    let browser = Browser::start(LAPTOP).await;
    browser
        .client
        .goto(&login)
        .await
        .expect("the login link opens");
    browser
        .until(
            PATIENCE,
            "the session from the login link",
            "document.getElementById('session').textContent === 'signed in'",
        )
        .await;
    assert_eq!(
        browser.eval("location.pathname + location.search").await,
        json!("/"),
        "the login token leaves the address bar"
    );
    browser
        .until(
            PATIENCE,
            "both queues with their completed jobs and dead letters",
            "[...document.querySelectorAll('#queues tbody tr')].map(r => r.dataset.queue).join() === 'examples.emails,test.versioned' \
             && document.querySelector('#dead-tabs [data-queue=\"test.versioned\"] .count')?.textContent === '1' \
             && document.querySelector('#dead-tabs [data-queue=\"examples.emails\"] .count')?.textContent === '1' \
             && document.querySelector('#queues tr[data-queue=\"examples.emails\"] td:nth-child(6)')?.textContent === '3'",
        )
        .await;
    let emails_version = version_of(&host, "email-sender.wasm").await;
    let v1 = version_of(&host, "versioned.wasm").await;
    for version in [&emails_version, &v1] {
        let shown = format!(
            "[...document.querySelectorAll('#plugins .plugin-head .version')].some(v => v.textContent === '{version}')"
        );
        assert_eq!(
            browser.eval(&shown).await,
            json!(true),
            "version `{version}` is shown"
        );
    }
    browser
        .until(PATIENCE, "the fatal dead letter of examples.emails", "document.querySelector('#dead tbody tr .reason')?.textContent.startsWith('fatal error: job failed (fatal): invalid address')")
        .await;
    browser
        .until(
            PATIENCE,
            "the queue's cap under its name and the schedule's row",
            "document.querySelector('#queues tr[data-queue=\"examples.emails\"] .limits')?.textContent.includes('≤ 8 at once') \
             && document.querySelector('#schedules tr[data-schedule=\"nightly\"]')?.textContent.includes('0 3 * * * (Europe/Paris)')",
        )
        .await;
    browser.screenshot("1-scenario").await;

    browser
        .click("#dead-tabs [data-queue='test.versioned']")
        .await;
    let row = format!("#dead tbody tr[data-job-id='{doomed}']");
    browser
        .until(PATIENCE, "the exhausted dead letter of test.versioned", &format!("document.querySelector(\"{row} .reason\")?.textContent.startsWith('max attempts (2) exhausted after attempt 2')"))
        .await;
    browser.screenshot("2-dead-letters").await;

    // A swap to v2 appears in the history while the page stays loaded.
    browser.eval("window.stillTheSamePage = true").await;
    deploy(host.plugin_dir(), "versioned-v2");
    browser
        .until(PATIENCE, "the replacement in versioned's history", "[...document.querySelectorAll('#plugins .history li')].some(li => li.dataset.kind === 'replaced')")
        .await;
    let v2 = version_of(&host, "versioned.wasm").await;
    assert_ne!(v2, v1, "the file holds another version now");
    let replaced = browser
        .text("#plugins .history li[data-kind='replaced'] .what")
        .await;
    assert_eq!(
        replaced,
        Some(format!("{v1} → {v2}")),
        "the history names both versions"
    );
    assert_eq!(
        browser.eval("window.stillTheSamePage === true").await,
        json!(true),
        "no page reload"
    );
    browser.screenshot("3-reloaded").await;

    // v2 succeeds on attempt 3, so the replayed job completes after two retries.
    browser
        .click(&format!("{row} button[data-action='replay']"))
        .await;
    browser
        .until(
            PATIENCE,
            "the replayed letter to leave the dead letters",
            &format!("document.querySelector(\"{row}\") === null"),
        )
        .await;
    let completed = "jobhost_jobs_total{queue=\"test.versioned\",job_type=\"versioned.Echo\",outcome=\"completed\"} 1";
    eventually(PATIENCE, "the replayed job to complete", || async {
        get(&host.admin, &host.token(), "/metrics")
            .await
            .lines()
            .any(|l| l == completed)
    })
    .await;
    browser
        .until(PATIENCE, "the completion on the page", "document.querySelector('#queues tr[data-queue=\"test.versioned\"] td:nth-child(6)')?.textContent === '1'")
        .await;
    browser.screenshot("4-replayed").await;

    // Paused for the fleet from its row, and resumed.
    let versioned = "#queues tr[data-queue='test.versioned']";
    browser
        .click(&format!("{versioned} button[data-action='pause']"))
        .await;
    browser
        .until(
            PATIENCE,
            "the paused badge",
            &format!("document.querySelector(\"{versioned} .badge\")?.textContent === 'paused'"),
        )
        .await;
    host.wait_for_line(PATIENCE, |l| {
        l.contains("stopped consuming the paused queue") && l.contains(VERSIONED)
    });
    // A job queued on the paused queue, cancelled from the page: dead-lettered unrun once
    // the queue is resumed, saying who cancelled it.
    let cancelled = publish(
        &producer,
        "versioned.Echo",
        VERSIONED,
        json!({"message": "c"}),
    )
    .await
    .job_id
    .to_string();
    browser
        .eval(&format!(
            "(document.getElementById('cancel-id').value = '{cancelled}', \
             document.querySelector('#cancel-job button').click(), true)"
        ))
        .await;
    host.wait_for_line(PATIENCE, |l| {
        l.contains("operator order given to the fleet") && l.contains(&cancelled)
    });
    browser.screenshot("5-paused").await;
    browser
        .click(&format!("{versioned} button[data-action='resume']"))
        .await;
    let row = format!("#dead tbody tr[data-job-id='{cancelled}']");
    browser
        .until(PATIENCE, "the cancelled job's dead letter", &format!("document.querySelector(\"{row} .reason\")?.textContent.startsWith('cancelled by dashboard at ')"))
        .await;
    browser
        .until(PATIENCE, "the cancellation counted on its queue and among the failures", &format!("document.querySelector(\"{versioned} td:nth-child(10)\")?.textContent === '1' && [...document.querySelectorAll('#failures .badge')].some(b => b.textContent === 'cancelled')"))
        .await;
    browser
        .until(PATIENCE, "the Pause button back, without the badge", &format!("document.querySelector(\"{versioned} button[data-action='pause']\") !== null && document.querySelector(\"{versioned} .badge\") === null"))
        .await;
    host.wait_for_line(PATIENCE, |l| {
        l.contains("queue resumed by an operator") && l.contains(VERSIONED)
    });

    // The guide's picture (docs/dashboard.png): the whole page on a full-HD screen, on the
    // letters still dead.
    browser
        .client
        .set_window_size(1920, 1080)
        .await
        .expect("a full-HD window");
    browser
        .click("#dead-tabs [data-queue='examples.emails']")
        .await;
    browser
        .until(
            PATIENCE,
            "the letters of examples.emails",
            "document.querySelector('#dead tbody tr .reason') !== null",
        )
        .await;
    browser.screenshot("6-full-hd").await;
    browser
        .eval("document.getElementById('jobs-card').scrollIntoView() ?? true")
        .await;
    browser.screenshot("7-job-types").await;

    // A campaign of two emails as a batch: both sent, its report fires, and its row says
    // so with the report's job id.
    let opened = stdout_of(&host.cli(&[
        "enqueue",
        "--batch",
        "email.SendEmail",
        r#"[{"to": "carol@example.com", "subject": "welcome", "body": "hi"},
            {"to": "dave@example.com", "subject": "welcome", "body": "hi"}]"#,
        "--on-complete",
        "email.CampaignReport",
        "--context",
        r#"{"campaign": "welcome"}"#,
    ]));
    let batch = opened
        .split_whitespace()
        .last()
        .expect("the batch id ends the line");
    let batch_id = batch.parse().expect("a batch id");
    let report = callback_job_id(batch_id, Callback::OnComplete);
    let _lock = Cleanup::new(&[firing_lock(batch_id, Callback::OnComplete).name()]);
    let row = format!("#batches tr[data-batch='{batch}']");
    browser
        .until(PATIENCE, "the batch ended with its report fired", &format!(
            "document.querySelector(\"{row}\")?.textContent.includes('2 completed · 0 dead · 0 pending of 2') \
             && document.querySelector(\"{row} [data-callback='on_complete'] .mono[title='{report}']\") !== null"))
        .await;
    browser
        .eval("document.getElementById('batches-card').scrollIntoView() ?? true")
        .await;
    browser.screenshot("8-batches").await;
    browser.close().await;
}
