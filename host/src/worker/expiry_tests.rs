//! Expiring jobs on the memory backend under a paused clock: a job delivered at or after
//! its deadline does not run, and a retry or deferral that would come back after it does
//! not wait in a hold queue for nothing.
//!
//! Deadlines are on the host's wall clock, which a paused tokio clock does not stop, so
//! each test sets them far (minutes) from the holds it compares them with.

use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;

use crate::broker::Backend;
use crate::envelope::Envelope;
use crate::job::{Deadline, Outcome, now_ms};
use crate::metrics::Metrics;
use crate::testing::{Harness, native_unit};
use crate::worker::WorkerConfig;

/// A queue whose failed attempts wait `wait` before the next, three attempts in all.
fn retrying(wait: Duration) -> QueueConfig {
    let mut queue = QueueConfig::new("q");
    queue.retry = RetryPolicy::fixed(3, wait);
    queue
}

/// A harness serving `job` on `queue` with `handler`, counting into `metrics`.
async fn harness(
    queue: QueueConfig,
    handler: impl Fn(u32, u32) -> Outcome + Send + Sync + 'static,
    metrics: &Metrics,
) -> Harness {
    let manifest = super::tests::manifest("n", queue, &["job"]);
    let unit = native_unit("n", manifest, move |job| {
        handler(job.attempt, job.deferrals)
    });
    let config = WorkerConfig {
        telemetry: metrics.telemetry(),
        ..WorkerConfig::default()
    };
    Harness::start([unit], config).await
}

/// Publish a first attempt of `job`, keyed `key`, that expires at `deadline`.
async fn enqueue_expiring(h: &Harness, key: &str, deadline: Deadline) {
    let payload = serde_json::value::to_raw_value(&json!({ "key": key })).expect("json");
    let envelope = Envelope {
        expires_at_ms: Some(deadline),
        ..Envelope::new("job", "q", payload)
    };
    h.backend.publish(&envelope, None).await.expect("published");
}

fn in_minutes(minutes: u64) -> Deadline {
    Deadline::from_now(Duration::from_secs(minutes * 60))
}

#[tokio::test(start_paused = true)]
async fn a_job_delivered_after_its_deadline_is_dead_lettered_as_expired_without_running() {
    let metrics = Metrics::new();
    let h = harness(
        QueueConfig::new("q"),
        |_, _| Outcome::Completed { follow_ups: vec![] },
        &metrics,
    )
    .await;
    let past = Deadline::from_epoch_ms(now_ms() - 180_000);
    enqueue_expiring(&h, "late", past).await;
    h.run_until_idle().await;
    assert!(
        h.log.attempts_of("late").is_empty(),
        "an expired job never reaches its handler"
    );
    let letters = h.backend.dead_letters("q");
    assert_eq!(
        letters.len(),
        1,
        "the expired job is in the dead-letter queue"
    );
    let reason = &letters[0].reason;
    assert!(
        reason.starts_with("expired: delivered at ")
            && reason.contains(", 3m")
            && reason.ends_with(&format!(" after its deadline {past}")),
        "{reason}"
    );
    assert_eq!(letters[0].attempts, 1);
    let expired = r#"jobhost_jobs_total{queue="q",job_type="job",outcome="expired"}"#;
    assert_eq!(
        metrics.sample(expired),
        Some(1.0),
        "counted under its job type"
    );
    assert_eq!(
        metrics.sample(r#"jobhost_dead_letters_total{queue="q",cause="expired"}"#),
        None,
        "an expiry is not a failure"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_delivered_before_its_deadline_runs_and_keeps_it_across_its_retry() {
    let metrics = Metrics::new();
    let h = harness(
        retrying(Duration::from_secs(2)),
        |attempt, _| match attempt {
            1 => Outcome::Failed(JobError::retryable("down")),
            _ => Outcome::Completed { follow_ups: vec![] },
        },
        &metrics,
    )
    .await;
    let deadline = in_minutes(60);
    enqueue_expiring(&h, "on-time", deadline).await;
    h.run_until_idle().await;
    assert_eq!(h.log.attempts_of("on-time"), vec![1, 2]);
    let held = h.backend.deferred("q");
    assert_eq!(held.len(), 1, "the retry was held");
    assert_eq!(held[0].envelope.expires_at_ms, Some(deadline));
    assert!(h.backend.dead_letters("q").is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_wait_would_end_after_the_deadline_expires_at_once_without_a_hold() {
    let metrics = Metrics::new();
    let h = harness(
        retrying(Duration::from_secs(600)),
        |_, _| Outcome::Failed(JobError::retryable("down")),
        &metrics,
    )
    .await;
    let deadline = in_minutes(5);
    enqueue_expiring(&h, "doomed", deadline).await;
    h.run_until_idle().await;
    assert_eq!(h.log.attempts_of("doomed"), vec![1], "no second attempt");
    assert!(
        h.backend.deferred("q").is_empty(),
        "nothing waits in a hold queue only to expire"
    );
    let letters = h.backend.dead_letters("q");
    assert_eq!(letters.len(), 1);
    let reason = &letters[0].reason;
    assert!(
        reason.starts_with("expired: its retry would start at ")
            && reason.contains(&format!("after its deadline {deadline}"))
            && reason.ends_with("; it failed with: job failed (retryable): down"),
        "{reason}"
    );
    assert_eq!(letters[0].attempts, 1, "the attempt that failed");
    let expired = r#"jobhost_jobs_total{queue="q",job_type="job",outcome="expired"}"#;
    assert_eq!(metrics.sample(expired), Some(1.0));
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_deadline_is_kept_across_a_deferral_and_expires_a_later_one_that_would_pass_it() {
    let metrics = Metrics::new();
    let h = harness(
        QueueConfig::new("q"),
        |_, deferrals| {
            let delay = if deferrals == 0 {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(3600)
            };
            Outcome::Failed(JobError::deferred(delay))
        },
        &metrics,
    )
    .await;
    let deadline = in_minutes(30);
    enqueue_expiring(&h, "deferred", deadline).await;
    h.run_until_idle().await;
    let calls = h.log.calls_of("deferred");
    assert_eq!(
        calls.iter().map(|call| call.deferrals).collect::<Vec<_>>(),
        vec![0, 1],
        "the first deferral came back, the second was never held"
    );
    let held = h.backend.deferred("q");
    assert_eq!(held.len(), 1);
    assert_eq!(
        held[0].envelope.expires_at_ms,
        Some(deadline),
        "the deferral keeps the job's deadline"
    );
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].starts_with("expired: its deferral would end at ")
            && reasons[0].ends_with(&format!("after its deadline {deadline}")),
        "{}",
        reasons[0]
    );
    h.shutdown().await;
}
