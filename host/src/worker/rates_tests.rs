//! Rate limits on the memory backend, under a paused clock: the semantics the fleet has on
//! RabbitMQ (`host/tests/rabbitmq/rabbitmq_caps.rs` shows them with two hosts).

use std::path::Path;
use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig};
use serde_json::json;
use tokio::time::Instant;

use super::tests::manifest;
use crate::grants::{Grants, SharedGrants};
use crate::job::{Invocation, Outcome};
use crate::metrics::Metrics;
use crate::testing::Harness;
use crate::worker::{BoxFuture, Handler, Unit, WorkerConfig};

/// Completes every job after a tenth of a second of tokio time.
struct Brief;

impl Handler for Brief {
    fn invoke<'a>(&'a self, _job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

/// As [`Brief`], but a job whose payload says `"busy": true` is answered, on its first
/// delivery, as a service answers with `Retry-After: 5`.
struct BusyOnce;

impl Handler for BusyOnce {
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        let busy = job.deferrals == 0
            && serde_json::from_slice::<serde_json::Value>(job.payload)
                .is_ok_and(|payload| payload["busy"] == true);
        if busy {
            let wait = JobError::retry_after(Duration::from_secs(5), "429, Retry-After 5s");
            return Box::pin(async move { Outcome::Failed(wait) });
        }
        Brief.invoke(job)
    }
}

fn grants(toml: &str) -> Grants {
    Grants::parse(Path::new("jobhost.toml"), toml).expect("valid grants")
}

/// A harness serving job type `t` on queue `q` with [`Brief`], under the grants file
/// `toml`.
async fn limited(toml: &str) -> (Harness, Metrics) {
    limited_by(SharedGrants::new(grants(toml))).await
}

/// [`limited`] by the grants file in force in `grants`.
async fn limited_by(grants: SharedGrants) -> (Harness, Metrics) {
    serving(grants, std::sync::Arc::new(Brief)).await
}

/// [`limited_by`] with `handler` serving `t`.
async fn serving(grants: SharedGrants, handler: std::sync::Arc<dyn Handler>) -> (Harness, Metrics) {
    let unit = Unit::new(
        "n",
        "1",
        manifest("n", QueueConfig::new("q"), &["t"]),
        handler,
    );
    let metrics = Metrics::new();
    let config = WorkerConfig {
        caps: grants,
        telemetry: metrics.telemetry(),
        ..WorkerConfig::default()
    };
    (Harness::start([unit], config).await, metrics)
}

/// When each job whose payload mentions `key` started, after `start`, in order.
fn starts(h: &Harness, key: &str, start: Instant) -> Vec<Duration> {
    let mut starts: Vec<_> = h
        .log
        .calls_of(key)
        .iter()
        .map(|call| call.started - start)
        .collect();
    starts.sort();
    starts
}

#[tokio::test(start_paused = true)]
async fn a_queue_at_five_a_second_runs_fifty_jobs_over_nine_seconds_never_ahead_of_its_tokens() {
    let (h, metrics) = limited("[queues.q]\nrate = \"5/s\"\nburst = 5\n").await;
    let start = Instant::now();
    for i in 0..50 {
        h.enqueue("t", json!({ "k": "a", "i": i })).await;
    }
    h.run_until_idle().await;
    let starts = starts(&h, "a", start);
    assert_eq!(starts.len(), 50, "every job ran once");
    let last = starts[49];
    assert!(
        (Duration::from_secs(9)..=Duration::from_secs(10)).contains(&last),
        "the last job starts after 45 tokens at 5/s: {last:?}"
    );
    for (ran, at) in starts.iter().enumerate() {
        let allowed = 5.0 + 5.0 * at.as_secs_f64();
        assert!(
            (ran + 1) as f64 <= allowed + 1e-9,
            "{} jobs by {at:?}, more than burst + rate·t = {allowed}",
            ran + 1
        );
    }
    assert!(
        h.log
            .calls()
            .iter()
            .all(|c| c.attempt == 1 && c.deferrals == 0),
        "waiting for a token spends no attempt and is no deferral"
    );
    let throttled = metrics
        .sample(r#"jobhost_jobs_throttled_total{queue="q",reason="rate"}"#)
        .expect("throttled jobs are counted");
    assert!(throttled >= 45.0, "{throttled}");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_limited_key_does_not_slow_the_other_keys() {
    let (h, _) =
        limited("[jobs.t]\nrate = { key = \"customer\", limit = \"1/s\", burst = 1 }\n").await;
    let start = Instant::now();
    for i in 0..6 {
        h.enqueue("t", json!({ "customer": "a", "i": i })).await;
    }
    for i in 0..3 {
        h.enqueue("t", json!({ "customer": "b", "i": i })).await;
    }
    h.run_until_idle().await;
    let a = starts(&h, "a", start);
    let b = starts(&h, "b", start);
    assert_eq!((a.len(), b.len()), (6, 3), "every job ran once");
    assert!(
        a[5] >= Duration::from_secs(5),
        "key a runs one a second: {a:?}"
    );
    assert!(
        b[0] < Duration::from_millis(100),
        "key b starts at once, not behind key a's backlog: {b:?}"
    );
    assert!(
        b[2] <= Duration::from_secs(3),
        "key b has its own tokens, not key a's: {b:?}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_waiting_for_a_permit_spends_no_token() {
    // One at a time and two a minute: if the jobs that wait for the permit spent tokens,
    // the second job would wait for a token well past the first one's end.
    let (h, metrics) = limited("[queues.q]\nconcurrency = 1\nrate = \"2/m\"\nburst = 2\n").await;
    let start = Instant::now();
    for i in 0..2 {
        h.enqueue("t", json!({ "k": "a", "i": i })).await;
    }
    h.run_until_idle().await;
    let a = starts(&h, "a", start);
    assert_eq!(a.len(), 2, "every job ran once");
    assert!(
        a[1] < Duration::from_secs(5),
        "the burst's second token waited for the second job: {a:?}"
    );
    assert!(
        metrics
            .sample(r#"jobhost_jobs_throttled_total{queue="q",reason="concurrency"}"#)
            .is_some_and(|n| n >= 1.0),
        "the second job waited for the permit"
    );
    assert_eq!(
        metrics.sample(r#"jobhost_jobs_throttled_total{queue="q",reason="rate"}"#),
        None,
        "no job found its tokens spent"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_grants_file_changes_the_rate_for_the_jobs_that_start_after_it() {
    let file = SharedGrants::new(grants("[queues.q]\nrate = \"1/s\"\nburst = 1\n"));
    let (h, _) = limited_by(file.clone()).await;
    let start = Instant::now();
    for i in 0..4 {
        h.enqueue("t", json!({ "k": "slow", "i": i })).await;
    }
    h.run_until_idle().await;
    let slow = starts(&h, "slow", start);
    assert!(slow[3] >= Duration::from_secs(3), "one a second: {slow:?}");
    file.replace(grants("[queues.q]\nrate = \"100/s\"\n"));
    let start = Instant::now();
    for i in 0..20 {
        h.enqueue("t", json!({ "k": "fast", "i": i })).await;
    }
    h.run_until_idle().await;
    let fast = starts(&h, "fast", start);
    assert_eq!(fast.len(), 20, "every job ran once");
    assert!(
        fast[19] < Duration::from_secs(1),
        "the new limit's burst of 100 lets all 20 start within a second, as fast as the \
         prefetch of 16 takes them: {fast:?}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_holds_back_its_keys_other_jobs_only_where_the_limit_respects_it() {
    for respects in [true, false] {
        let toml = format!(
            "[jobs.t]\nrate = {{ key = \"customer\", limit = \"1/s\", burst = 1, \
             respect_retry_after = {respects} }}\n"
        );
        let (h, _) = serving(
            SharedGrants::new(grants(&toml)),
            std::sync::Arc::new(BusyOnce),
        )
        .await;
        let start = Instant::now();
        // The busy job takes customer a's one token and is answered `Retry-After: 5`.
        h.enqueue("t", json!({ "customer": "a", "busy": true }))
            .await;
        for i in 0..3 {
            h.enqueue("t", json!({ "customer": "a", "i": i })).await;
            h.enqueue("t", json!({ "customer": "b", "i": i })).await;
        }
        h.run_until_idle().await;
        let (a, b) = (starts(&h, "a", start), starts(&h, "b", start));
        assert_eq!(
            (a.len(), b.len()),
            (5, 3),
            "every job ran once, the busy one twice"
        );
        let others = &a[1..];
        if respects {
            assert!(
                others.iter().all(|at| *at >= Duration::from_secs(5)),
                "customer a's jobs wait out the Retry-After: {a:?}"
            );
            assert!(
                a[4] >= Duration::from_secs(8),
                "then one a second, from none saved up: {a:?}"
            );
        } else {
            assert!(
                others[0] < Duration::from_secs(5),
                "without respect_retry_after customer a's next job takes the next token: {a:?}"
            );
        }
        assert!(
            b[2] < Duration::from_secs(3),
            "customer b is not held: {b:?}"
        );
        h.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_types_rate_without_a_key_limits_all_its_jobs_together() {
    let (h, _) = limited("[jobs.t]\nrate = { limit = \"1/s\", burst = 1 }\n").await;
    let start = Instant::now();
    for customer in ["a", "b", "c", "d"] {
        h.enqueue("t", json!({ "customer": customer, "k": "all" }))
            .await;
    }
    h.run_until_idle().await;
    let all = starts(&h, "all", start);
    assert_eq!(all.len(), 4, "every job ran once");
    assert!(
        all[3] >= Duration::from_secs(3),
        "one a second across every customer: {all:?}"
    );
    h.shutdown().await;
}
