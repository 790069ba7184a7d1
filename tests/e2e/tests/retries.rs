//! docs/plugin-authors.md, "Retries and backoff", sentence by sentence, on the real `scripted`
//! plugin and the memory backend under tokio's paused clock.

use std::collections::BTreeMap;
use std::time::Duration;

use jobhost::broker::Backend;
use jobhost::envelope::Envelope;
use jobhost::policy::Granularity;
use jobhost::testing::{Harness, load_plugin};
use jobhost::worker::WorkerConfig;
use serde_json::json;
use serde_json::value::RawValue;

const EMAILS: &str = "test.emails";
const BARE: &str = "test.bare";
const JITTERED: &str = "test.jittered";
const URGENT: &str = "test.urgent";

async fn harness_with(config: WorkerConfig) -> Harness {
    let engine = jobhost_e2e::engine(env!("CARGO_TARGET_TMPDIR"));
    let unit = load_plugin(&engine, &jobhost_fixtures::wasm("scripted")).await;
    Harness::start([unit], config).await
}

async fn harness() -> Harness {
    harness_with(WorkerConfig::default()).await
}

fn secs(values: &[u64]) -> Vec<Duration> {
    values.iter().map(|s| Duration::from_secs(*s)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_job_that_succeeds_on_its_third_attempt_has_one_id_and_three_deliveries() {
    let h = harness().await;
    let job = h
        .enqueue(
            "scripted.SendEmail",
            json!({"key": "flaky@example.com", "fail_times": 2}),
        )
        .await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("flaky@example.com"), vec![1, 2, 3]);
    let acked = h.backend.acked(EMAILS);
    assert_eq!(
        acked.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(
        acked.iter().all(|e| e.job_id == job.job_id),
        "same job id throughout"
    );
    assert!(h.backend.dead_letters(EMAILS).is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn running_out_of_attempts_dead_letters_with_a_reason_naming_both_numbers() {
    let h = harness().await;
    h.enqueue(
        "scripted.HastyEmail",
        json!({"key": "down@example.com", "fail_times": 9}),
    )
    .await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("down@example.com"), vec![1, 2]);
    assert_eq!(
        h.dead_letter_reasons(EMAILS),
        ["max attempts (2) exhausted after attempt 2: job failed (retryable): service is down"]
    );
    let dead = &h.backend.dead_letters(EMAILS)[0];
    assert_eq!(dead.attempts, 2);
    assert_eq!(
        dead.envelope().expect("an envelope").attempt,
        2,
        "the last attempt's envelope is kept"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_policy_with_more_attempts_and_another_shape_overrides_its_queue() {
    let h = harness().await;
    h.enqueue(
        "scripted.PatientEmail",
        json!({"key": "patient", "fail_times": 4}),
    )
    .await;
    h.run_until_idle().await;

    assert_eq!(
        h.log.attempts_of("patient"),
        vec![1, 2, 3, 4, 5],
        "5 attempts where the queue allows 3"
    );
    assert_eq!(
        h.log.waits_of("patient"),
        secs(&[3, 3, 3, 3]),
        "fixed 3s where the queue is exponential"
    );
    assert_eq!(
        h.log.calls_of("patient")[0].max_attempts,
        5,
        "the handler is told the effective policy"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_policy_with_fewer_attempts_overrides_its_queue() {
    let h = harness().await;
    h.enqueue(
        "scripted.HastyEmail",
        json!({"key": "hasty", "fail_times": 2}),
    )
    .await;
    h.enqueue(
        "scripted.SendEmail",
        json!({"key": "queue-policy", "fail_times": 2}),
    )
    .await;
    h.run_until_idle().await;

    assert_eq!(
        h.log.attempts_of("hasty"),
        vec![1, 2],
        "the job's 2 attempts, not the queue's 3"
    );
    assert_eq!(
        h.log.attempts_of("queue-policy"),
        vec![1, 2, 3],
        "its sibling keeps the queue's 3"
    );
    assert_eq!(
        h.log.waits_of("hasty"),
        secs(&[1]),
        "backoff none still waits one granularity step"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_queue_without_retry_dead_letters_on_the_first_retryable_failure() {
    let h = harness().await;
    h.enqueue("scripted.BareJob", json!({"key": "bare", "fail_times": 1}))
        .await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("bare"), vec![1]);
    assert_eq!(
        h.dead_letter_reasons(BARE),
        ["max attempts (1) exhausted after attempt 1: job failed (retryable): service is down"]
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_policy_gives_retries_on_a_queue_that_has_none() {
    let h = harness().await;
    h.enqueue(
        "scripted.BareJobWithRetry",
        json!({"key": "rescued", "fail_times": 2}),
    )
    .await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("rescued"), vec![1, 2, 3]);
    assert_eq!(h.log.waits_of("rescued"), secs(&[5, 5]));
    assert!(h.backend.dead_letters(BARE).is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_dead_letters_after_one_attempt_whatever_the_policy() {
    let h = harness().await;
    let payload =
        json!({"key": "fatal", "fail_times": 1, "failure": "fatal", "message": "bad address"});
    h.enqueue("scripted.PatientEmail", payload).await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("fatal"), vec![1]);
    assert_eq!(
        h.dead_letter_reasons(EMAILS),
        ["fatal error: job failed (fatal): bad address"]
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_guest_panic_costs_one_attempt_and_reports_its_message() {
    let h = harness().await;
    let payload =
        json!({"key": "panicky", "fail_times": 9, "failure": "panic", "message": "kaboom"});
    h.enqueue("scripted.SendEmail", payload).await;
    h.run_until_idle().await;

    assert_eq!(
        h.log.attempts_of("panicky"),
        vec![1, 2, 3],
        "a panic is retried like a retryable failure"
    );
    let reason = &h.dead_letter_reasons(EMAILS)[0];
    assert!(
        reason.starts_with(
            "max attempts (3) exhausted after attempt 3: job failed (retryable): kaboom"
        ),
        "the panic message reaches the dead letter: {reason}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_payload_the_guest_cannot_decode_is_dead_lettered_without_retries() {
    let h = harness().await;
    h.enqueue("scripted.SendEmail", json!({"nokey": "undecodable"}))
        .await;
    h.run_until_idle().await;

    assert_eq!(h.log.attempts_of("undecodable"), vec![1]);
    let reason = &h.dead_letter_reasons(EMAILS)[0];
    assert!(
        reason.starts_with("decode error: missing field `key`"),
        "{reason}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn waits_between_attempts_are_the_policy_delays_without_jitter() {
    let h = harness().await;
    h.enqueue("scripted.SendEmail", json!({"key": "exp", "fail_times": 2}))
        .await;
    h.run_until_idle().await;

    assert_eq!(
        h.log.waits_of("exp"),
        secs(&[1, 2]),
        "base 1s, factor 2: 1s then 2s"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn waits_are_rounded_up_to_the_retry_granularity() {
    let config = WorkerConfig {
        retry_granularity: Granularity::new(Duration::from_secs(10)),
        ..WorkerConfig::default()
    };
    let h = harness_with(config).await;
    h.enqueue(
        "scripted.PatientEmail",
        json!({"key": "coarse", "fail_times": 2}),
    )
    .await;
    h.run_until_idle().await;

    assert_eq!(
        h.log.waits_of("coarse"),
        secs(&[10, 10]),
        "3s rounds up to one 10s step"
    );
    let delays: Vec<Duration> = h
        .backend
        .deferred(EMAILS)
        .iter()
        .map(|held| held.delay)
        .collect();
    assert_eq!(delays, secs(&[10, 10]));
    assert_eq!(
        h.backend.hold_queues_created(EMAILS),
        1,
        "one rounded delay, one hold queue `test.emails.deferred.10000`"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn jittered_waits_stay_between_one_step_and_the_rounded_up_computed_wait() {
    let h = harness().await;
    for i in 0..20 {
        h.enqueue(
            "scripted.JitteredJob",
            json!({"key": format!("jitter-{i}"), "fail_times": 4}),
        )
        .await;
    }
    h.run_until_idle().await;

    for i in 0..20 {
        let waits = h.log.waits_of(&format!("jitter-{i}"));
        assert_eq!(waits.len(), 4);
        for (failed_attempt, wait) in (1..).zip(&waits) {
            let ceiling = Duration::from_secs(1 << (failed_attempt - 1));
            assert!(
                *wait >= Duration::from_secs(1) && *wait <= ceiling.max(Duration::from_secs(1)),
                "job {i}, failed attempt {failed_attempt}: waited {wait:?}, outside [1s, {ceiling:?}]"
            );
        }
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_storm_spreads_over_the_interval_and_stays_within_the_hold_queue_bound() {
    let h = harness().await;
    for i in 0..1000 {
        h.enqueue(
            "scripted.JitteredJob",
            json!({"key": format!("storm-{i}"), "fail_times": 3}),
        )
        .await;
    }
    h.run_until_idle().await;

    // The third retry's computed wait is 4s; full jitter spreads it over 1..=4 s steps.
    let mut by_wait: BTreeMap<Duration, usize> = BTreeMap::new();
    for i in 0..1000 {
        let waits = h.log.waits_of(&format!("storm-{i}"));
        assert_eq!(waits.len(), 3, "job {i} ran 4 attempts");
        *by_wait.entry(waits[2]).or_default() += 1;
    }
    assert_eq!(
        by_wait.keys().copied().collect::<Vec<_>>(),
        secs(&[1, 2, 3, 4]),
        "every step of the interval is used"
    );
    assert!(
        by_wait.values().all(|n| *n < 500),
        "no instant takes most of the storm: {by_wait:?}"
    );
    let cap_over_granularity = 300;
    assert!(h.backend.hold_queues_created(JITTERED) <= cap_over_granularity);
    assert!(
        h.backend.hold_queues_created(JITTERED) <= 4,
        "only the delays the storm used"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deferral_spends_no_attempt_and_never_consults_the_retry_policy() {
    let h = harness().await;
    let payload = json!({"key": "deferred", "defer_times": 3, "defer_ms": 1500});
    h.enqueue("scripted.BareJob", payload).await;
    h.run_until_idle().await;

    let calls = h.log.calls_of("deferred");
    let seen: Vec<(u32, u32)> = calls.iter().map(|c| (c.attempt, c.deferrals)).collect();
    assert_eq!(
        seen,
        vec![(1, 0), (1, 1), (1, 2), (1, 3)],
        "three deferrals on a one-attempt policy, then success"
    );
    assert_eq!(
        h.log.waits_of("deferred"),
        secs(&[2, 2, 2]),
        "1.5s rounded up to the granularity"
    );
    assert!(h.backend.dead_letters(BARE).is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deferral_comes_back_ahead_of_the_backlog_and_a_later_retry_does_not() {
    let h = harness_with(WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    })
    .await;
    // A backlog that reaches the work queue at t = 1s, just before the deferral does.
    for i in 0..10 {
        let payload = RawValue::from_string(json!({"key": format!("backlog-{i}")}).to_string())
            .expect("json");
        let backlog = Envelope::new("scripted.UrgentJob", URGENT, payload);
        h.backend
            .publish(
                &backlog,
                Granularity::default().round(Duration::from_secs(1)).ok(),
            )
            .await
            .expect("publish");
    }
    let payload = json!({"key": "vip", "defer_times": 1, "defer_ms": 1000, "fail_times": 1});
    h.enqueue("scripted.UrgentJob", payload).await;
    h.run_until_idle().await;

    let order: Vec<(String, u32, u8)> = h
        .log
        .calls()
        .iter()
        .map(|c| {
            let key = serde_json::from_str::<serde_json::Value>(&c.payload).expect("json")["key"]
                .to_string();
            (key.trim_matches('"').to_owned(), c.attempt, c.priority)
        })
        .collect();
    assert_eq!(order[0], ("vip".to_owned(), 1, 0), "first delivery defers");
    assert_eq!(
        order[1],
        ("vip".to_owned(), 1, 5),
        "the deferral returns first, at the queue's max priority"
    );
    assert!(
        order[2..12]
            .iter()
            .all(|(key, _, _)| key.starts_with("backlog-")),
        "then the backlog: {order:?}"
    );
    assert_eq!(
        order[12],
        ("vip".to_owned(), 2, 0),
        "the retry after it waits its turn at priority 0"
    );
    let retry = h
        .backend
        .deferred(URGENT)
        .into_iter()
        .find(|held| held.envelope.attempt == 2)
        .expect("a retry");
    assert_eq!(
        (retry.envelope.priority, retry.envelope.deferrals),
        (0, 1),
        "a retry resets the priority"
    );
    h.shutdown().await;
}
