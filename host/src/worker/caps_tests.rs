//! Concurrency caps on the memory backend, under a paused clock: the semantics the fleet
//! has on RabbitMQ (`host/tests/rabbitmq/rabbitmq_caps.rs` shows them with two hosts).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobhost_sdk::QueueConfig;
use serde_json::json;
use tokio::time::Instant;

use super::tests::manifest;
use crate::broker::Permits;
use crate::grants::{Grants, SharedGrants};
use crate::job::{Invocation, Outcome};
use crate::metrics::Metrics;
use crate::testing::Harness;
use crate::worker::{BoxFuture, Handler, Unit, WorkerConfig};

/// Takes a second of tokio time per job and keeps, per value of the payload's `customer`
/// field (`-` without one), how many ran at once at most; and the same over all jobs.
#[derive(Default)]
struct Ledger {
    running: Mutex<HashMap<String, usize>>,
    peaks: Mutex<HashMap<String, usize>>,
}

const ALL: &str = "*";

impl Ledger {
    fn enter(&self, key: &str) {
        let mut running = self.running.lock().expect("ledger");
        let mut peaks = self.peaks.lock().expect("ledger");
        for key in [key, ALL] {
            let now = running.entry(key.to_owned()).or_default();
            *now += 1;
            let peak = peaks.entry(key.to_owned()).or_default();
            *peak = (*peak).max(*now);
        }
    }

    fn leave(&self, key: &str) {
        let mut running = self.running.lock().expect("ledger");
        for key in [key, ALL] {
            *running.get_mut(key).expect("entered") -= 1;
        }
    }

    fn peak(&self, key: &str) -> usize {
        self.peaks
            .lock()
            .expect("ledger")
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

impl Handler for Ledger {
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let payload: serde_json::Value =
                serde_json::from_slice(job.payload).expect("a JSON payload");
            let key = payload["customer"].as_str().unwrap_or("-").to_owned();
            self.enter(&key);
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.leave(&key);
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

fn grants(toml: &str) -> Grants {
    Grants::parse(Path::new("jobhost.toml"), toml).expect("valid grants")
}

/// A harness serving job type `t` on queue `q` with a [`Ledger`], under `caps`.
async fn capped_by(caps: SharedGrants) -> (Arc<Ledger>, Harness, Metrics) {
    let ledger = Arc::new(Ledger::default());
    let unit = Unit::new(
        "n",
        "1",
        manifest("n", QueueConfig::new("q"), &["t"]),
        ledger.clone(),
    );
    let metrics = Metrics::new();
    let config = WorkerConfig {
        caps,
        telemetry: metrics.telemetry(),
        ..WorkerConfig::default()
    };
    (ledger, Harness::start([unit], config).await, metrics)
}

/// [`capped_by`] the grants file `toml`.
async fn capped(toml: &str) -> (Arc<Ledger>, Harness, Metrics) {
    capped_by(SharedGrants::new(grants(toml))).await
}

#[tokio::test(start_paused = true)]
async fn a_queue_cap_of_two_runs_ten_jobs_two_at_a_time_without_spending_attempts() {
    let (ledger, h, metrics) = capped("[queues.q]\nconcurrency = 2\n").await;
    for i in 0..10 {
        h.enqueue("t", json!({ "i": i })).await;
    }
    h.run_until_idle().await;
    let calls = h.log.calls();
    assert_eq!(calls.len(), 10, "every job ran once");
    assert_eq!(ledger.peak(ALL), 2, "the cap is reached and never exceeded");
    assert!(
        calls.iter().all(|c| c.attempt == 1 && c.deferrals == 0),
        "waiting for a permit spends no attempt and is no deferral: {calls:?}"
    );
    let throttled = metrics
        .sample(r#"jobhost_jobs_throttled_total{queue="q",reason="concurrency"}"#)
        .expect("throttled jobs are counted");
    assert!(throttled >= 8.0, "{throttled}");
    assert_eq!(
        metrics.sample(r#"jobhost_jobs_total{queue="q",job_type="t",outcome="throttled"}"#),
        Some(throttled),
        "a throttled job counts under its job type"
    );
    let permits = Permits::for_queue("q", 2, WorkerConfig::default().broker_consumer_timeout);
    assert_eq!(
        h.backend.permits_held(&permits),
        0,
        "every permit was given back"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_capped_key_does_not_hold_back_the_other_keys() {
    let (ledger, h, _) =
        capped("[jobs.t]\nconcurrency = { key = \"customer\", limit = 1 }\n").await;
    let start = Instant::now();
    for i in 0..5 {
        h.enqueue("t", json!({ "customer": "a", "i": i })).await;
    }
    h.enqueue("t", json!({ "customer": "b" })).await;
    for i in 0..3 {
        h.enqueue("t", json!({ "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(h.log.calls().len(), 9, "every job ran once");
    assert_eq!(ledger.peak("a"), 1, "key a runs one at a time");
    assert_eq!(
        ledger.peak("-"),
        1,
        "jobs without the key share one bucket, capped like a key"
    );
    let b = h.log.calls_of("b");
    assert!(
        b[0].started - start < Duration::from_secs(1),
        "key b starts at once, not behind key a's backlog: {:?}",
        b[0].started - start
    );
    assert!(ledger.peak(ALL) >= 2, "keys run side by side");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_under_both_caps_holds_a_permit_of_each() {
    let (ledger, h, _) = capped(
        "[queues.q]\nconcurrency = 2\n\
         [jobs.t]\nconcurrency = { key = \"customer\", limit = 1 }\n",
    )
    .await;
    for customer in ["a", "a", "b", "b", "c", "c"] {
        h.enqueue("t", json!({ "customer": customer })).await;
    }
    h.run_until_idle().await;
    assert_eq!(h.log.calls().len(), 6, "every job ran once");
    assert_eq!(ledger.peak(ALL), 2, "the queue's cap holds");
    for key in ["a", "b", "c"] {
        assert_eq!(ledger.peak(key), 1, "the cap of key {key} holds");
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_grants_file_changes_the_cap_for_the_jobs_that_start_after_it() {
    let caps = SharedGrants::new(grants("[queues.q]\nconcurrency = 1\n"));
    let (ledger, h, _) = capped_by(caps.clone()).await;
    for i in 0..4 {
        h.enqueue("t", json!({ "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(ledger.peak(ALL), 1, "one at a time under the first file");
    caps.replace(grants("[queues.q]\nconcurrency = 3\n"));
    for i in 4..10 {
        h.enqueue("t", json!({ "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(h.log.calls().len(), 10, "every job ran once");
    assert_eq!(ledger.peak(ALL), 3, "three at a time under the edited file");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_hostile_key_is_capped_like_any_other() {
    let (ledger, h, _) =
        capped("[jobs.t]\nconcurrency = { key = \"customer\", limit = 1 }\n").await;
    let hostile = format!("\u{0}\r\n\u{202e}{}", "k".repeat(1 << 20));
    for i in 0..3 {
        h.enqueue("t", json!({ "customer": hostile, "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(h.log.calls().len(), 3, "every job ran once");
    assert_eq!(
        ledger.peak(&hostile),
        1,
        "a megabyte of control characters is a key"
    );
    h.shutdown().await;
}

/// A harness like [`capped_by`] whose plugin declares `limits` on queue `q` and job `t`.
async fn declaring(
    queue: jobhost_sdk::limits::QueueLimits,
    job: jobhost_sdk::limits::JobLimits,
    caps: SharedGrants,
) -> (Arc<Ledger>, Harness) {
    let ledger = Arc::new(Ledger::default());
    let mut declared = manifest("n", QueueConfig::new("q"), &["t"]);
    declared.limits.queues.insert("q".to_owned(), queue);
    declared.limits.jobs.insert("t".to_owned(), job);
    let unit = Unit::new("n", "1", declared, ledger.clone());
    let config = WorkerConfig {
        caps,
        ..WorkerConfig::default()
    };
    (ledger, Harness::start([unit], config).await)
}

#[tokio::test(start_paused = true)]
async fn a_cap_the_plugin_declares_binds_until_the_grants_file_sets_another() {
    use jobhost_sdk::limits::{JobLimits, KeyCap, QueueLimits};
    let queue = QueueLimits {
        concurrency: Some(2),
        rate: None,
    };
    let job = JobLimits {
        concurrency: Some(KeyCap {
            key: "customer".to_owned(),
            limit: 1,
        }),
        rate: None,
        unique: None,
    };
    let file = SharedGrants::new(grants(""));
    let (ledger, h) = declaring(queue, job, file.clone()).await;
    for i in 0..6 {
        let customer = ["a", "b", "c"][i % 3];
        h.enqueue("t", json!({ "customer": customer, "i": i }))
            .await;
    }
    h.run_until_idle().await;
    assert_eq!(h.log.calls().len(), 6, "every job ran once");
    assert_eq!(
        ledger.peak(ALL),
        2,
        "the queue cap the plugin declares holds"
    );
    assert_eq!(ledger.peak("a"), 1, "and its cap per key");
    file.replace(grants(
        "[queues.q]\nconcurrency = 6\n[jobs.t]\nconcurrency = { key = \"customer\", limit = 3 }\n",
    ));
    for i in 0..6 {
        h.enqueue("t", json!({ "customer": "d", "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(
        ledger.peak("d"),
        3,
        "the operator's file overrides the plugin"
    );
    h.shutdown().await;
}
