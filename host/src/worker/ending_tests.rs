//! A delivery always ends: what a hostile message, a hostile handler or a failing broker
//! does to a delivery, on the memory backend under a paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::broker::{
    Backend, BrokerError, DeadLetterOut, MAX_HOLD_DELAY, MemoryBackend, MemoryLease, Permits,
    Tokens,
};
use crate::envelope::Envelope;
use crate::job::{FollowUp, Manifest, Outcome};
use crate::metrics::Metrics;
use crate::policy::HoldDelay;
use crate::testing::{Harness, native_unit};
use crate::worker::{Plugins, Unit, Worker, WorkerConfig};

fn manifest(queue: QueueConfig, jobs: &[&str]) -> Manifest {
    super::tests::manifest("n", queue, jobs)
}

fn retrying(name: &str) -> QueueConfig {
    let mut queue = QueueConfig::new(name);
    queue.retry = RetryPolicy::fixed(3, Duration::from_secs(1));
    queue
}

/// A unit serving `job` on `queue` whose handler returns what `outcome` says for each
/// attempt number.
fn unit(queue: QueueConfig, job: &str, outcome: fn(u32) -> Outcome) -> Unit {
    native_unit("n", manifest(queue, &[job]), move |job| {
        outcome(job.attempt)
    })
}

fn ok() -> Outcome {
    Outcome::Completed { follow_ups: vec![] }
}

#[tokio::test(start_paused = true)]
async fn a_retry_goes_to_the_queue_of_its_route_whatever_queue_the_envelope_names() {
    let h = Harness::start(
        [unit(retrying("q"), "flaky", |attempt| match attempt {
            1 => Outcome::Failed(JobError::retryable("once")),
            _ => ok(),
        })],
        WorkerConfig::default(),
    )
    .await;
    let payload = RawValue::from_string(r#"{"key":"stray"}"#.to_owned()).expect("json");
    let stray = Envelope::new("flaky", "no.such.queue", payload);
    h.publish_raw("q", &stray.encode());
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("stray"),
        vec![1, 2],
        "retried once, then done"
    );
    let held = h.backend.deferred("q");
    assert_eq!(held.len(), 1);
    assert_eq!(
        held[0].envelope.queue, "q",
        "the retry names its route's queue"
    );
    assert!(h.dead_letter_reasons("q").is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deferral_longer_than_a_hold_queue_can_hold_is_dead_lettered_naming_the_delay() {
    let h = Harness::start(
        // Built by hand, as a guest of another SDK could send it: the SDK's constructor
        // would already turn it into a fatal error.
        [unit(QueueConfig::new("q"), "api", |_| {
            Outcome::Failed(JobError::Deferred {
                delay: Duration::from_millis(3_000_000_000),
                reason: "rate limited".into(),
                retry_after: false,
            })
        })],
        WorkerConfig::default(),
    )
    .await;
    h.enqueue("api", json!({"key": "forever"})).await;
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("forever"),
        vec![1],
        "run once, never spun"
    );
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(reasons.len(), 1);
    assert_eq!(
        reasons[0],
        format!(
            "cannot defer the job: a delay of 3000000s is longer than a hold queue can hold \
             (at most {MAX_HOLD_DELAY:?})"
        )
    );
    assert!(h.backend.deferred("q").is_empty(), "nothing was held");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_delayed_longer_than_a_hold_queue_can_hold_dead_letters_its_job_as_delay_too_long()
 {
    let h = Harness::start(
        [unit(retrying("q"), "parent", |_| Outcome::Completed {
            follow_ups: vec![FollowUp {
                job_id: Uuid::new_v4(),
                job_type: "parent".into(),
                payload: RawValue::from_string("{}".into()).expect("json"),
                delay: Some(MAX_HOLD_DELAY + Duration::from_secs(1)),
                batch: None,
            }],
        })],
        WorkerConfig::default(),
    )
    .await;
    h.enqueue("parent", json!({"key": "p"})).await;
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("p"),
        vec![1],
        "no attempt can do better, so it is not retried"
    );
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].starts_with("cannot enqueue a follow-up job: a delay of"),
        "{}",
        reasons[0]
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_type_of_200_kb_is_dead_lettered_with_a_bounded_reason() {
    let h = Harness::start(
        [unit(QueueConfig::new("q"), "known", |_| ok())],
        WorkerConfig::default(),
    )
    .await;
    let payload = RawValue::from_string("{}".to_owned()).expect("json");
    let huge = Envelope::new("x".repeat(200_000), "q", payload);
    h.publish_raw("q", &huge.encode());
    h.enqueue("known", json!({"key": "behind"})).await;
    h.run_until_idle().await;
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].starts_with("no handler for job type `xxxx") && reasons[0].len() < 4096,
        "{} bytes",
        reasons[0].len()
    );
    assert_eq!(h.log.attempts_of("behind"), vec![1]);
    h.shutdown().await;
}

/// A memory backend whose publishes fail as `fail` says, counting them.
#[derive(Clone)]
struct Failing {
    inner: MemoryBackend,
    fail: fn(&Envelope, Option<HoldDelay>) -> Option<BrokerError>,
    dead_letters_fail: bool,
}

impl Backend for Failing {
    type Consumer = <MemoryBackend as Backend>::Consumer;
    type Lease = MemoryLease;

    async fn declare(&self, queue: &QueueConfig) -> Result<(), BrokerError> {
        self.inner.declare(queue).await
    }

    async fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> Result<(), BrokerError> {
        match (self.fail)(envelope, delay) {
            Some(error) => Err(error),
            None => self.inner.publish(envelope, delay).await,
        }
    }

    async fn dead_letter(&self, letter: DeadLetterOut<'_>) -> Result<(), BrokerError> {
        if self.dead_letters_fail {
            return Err(BrokerError::Connection("dead letters are down".into()));
        }
        self.inner.dead_letter(letter).await
    }

    async fn consume(&self, queue: &QueueConfig) -> Result<Self::Consumer, BrokerError> {
        self.inner.consume(queue).await
    }

    async fn take_token(&self, tokens: &Tokens) -> Result<bool, BrokerError> {
        self.inner.take_token(tokens).await
    }

    async fn hold_tokens(&self, tokens: &Tokens, delay: Duration) -> Result<(), BrokerError> {
        self.inner.hold_tokens(tokens, delay).await
    }

    async fn take_permit(&self, permits: &Permits) -> Result<Option<MemoryLease>, BrokerError> {
        self.inner.take_permit(permits).await
    }

    fn inline_limit(&self) -> Option<Duration> {
        self.inner.inline_limit()
    }
}

/// Runs a worker on `backend` serving `unit`, counting into `metrics`, with one job
/// enqueued; returns the times its handler ran, once the job's queue is idle.
async fn run_one(
    backend: Failing,
    queue: &QueueConfig,
    job_type: &str,
    metrics: &Metrics,
) -> Vec<Instant> {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let recorded = runs.clone();
    let unit = native_unit("n", manifest(queue.clone(), &[job_type]), move |job| {
        recorded.lock().expect("runs").push(Instant::now());
        match job.attempt {
            1 => Outcome::Failed(JobError::retryable("fails once")),
            _ => ok(),
        }
    });
    let plugins = Plugins::new();
    plugins.install(unit).expect("installed");
    backend.inner.declare(queue).await.expect("declared");
    let payload = RawValue::from_string("{}".to_owned()).expect("json");
    let first = Envelope::new(job_type, queue.name.as_str(), payload);
    backend.inner.publish(&first, None).await.expect("enqueued");
    let shutdown = CancellationToken::new();
    let config = WorkerConfig {
        telemetry: metrics.telemetry(),
        ..WorkerConfig::default()
    };
    let worker = tokio::spawn(Worker::new(backend.clone(), plugins, config).run(shutdown.clone()));
    let deadline = Instant::now() + Duration::from_secs(600);
    let inner = &backend.inner;
    while inner.ready(&queue.name) + inner.unacked(&queue.name) + inner.waiting(&queue.name) > 0 {
        assert!(Instant::now() < deadline, "the delivery never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    worker.await.expect("the worker stops");
    Arc::try_unwrap(runs)
        .expect("one owner")
        .into_inner()
        .expect("runs")
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_can_never_be_published_dead_letters_its_job_with_the_cause() {
    let backend = Failing {
        inner: MemoryBackend::new(),
        fail: |_, delay| {
            delay.map(|_| BrokerError::Refused {
                queue: "q.deferred.1000".into(),
                reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl'".into(),
            })
        },
        dead_letters_fail: false,
    };
    let queue = retrying("q");
    let metrics = Metrics::new();
    let runs = run_one(backend.clone(), &queue, "job", &metrics).await;
    assert_eq!(runs.len(), 1, "run once, not again and again");
    for (series, count) in [
        (
            r#"jobhost_publish_failures_total{queue="q",kind="permanent"}"#,
            1.0,
        ),
        (
            r#"jobhost_dead_letters_total{queue="q",cause="publish_failed"}"#,
            1.0,
        ),
        (
            r#"jobhost_jobs_total{queue="q",job_type="job",outcome="dead_lettered"}"#,
            1.0,
        ),
    ] {
        assert_eq!(metrics.sample(series), Some(count), "{series}");
    }
    let letters = backend.inner.dead_letters("q");
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].reason.starts_with(
            "retry could not be published: broker refused `q.deferred.1000`: PRECONDITION_FAILED"
        ),
        "{}",
        letters[0].reason
    );
    assert_eq!(
        letters[0].attempts, 2,
        "the attempt the retry would have been"
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_backs_off_and_a_delivery_that_never_settles_ends_as_poison() {
    let backend = Failing {
        inner: MemoryBackend::new(),
        fail: |_, delay| delay.map(|_| BrokerError::Connection("connection reset".into())),
        dead_letters_fail: false,
    };
    let queue = retrying("q");
    let metrics = Metrics::new();
    let runs = run_one(backend.clone(), &queue, "job", &metrics).await;
    let limit = WorkerConfig::default().max_redeliveries as usize;
    // Every run's retry failed to publish; every delivery after the first was a
    // redelivery, the last one dead-lettered without running, so under no job type.
    let runs_counted = limit as f64;
    for (series, count) in [
        (
            r#"jobhost_publish_failures_total{queue="q",kind="transient"}"#,
            runs_counted,
        ),
        (r#"jobhost_redeliveries_total{queue="q"}"#, runs_counted),
        (
            r#"jobhost_dead_letters_total{queue="q",cause="poison"}"#,
            1.0,
        ),
        (
            r#"jobhost_jobs_total{queue="q",job_type="other",outcome="dead_lettered"}"#,
            1.0,
        ),
        // Each delivery dropped unsettled ended as well as the last one.
        ("jobhost_jobs_in_flight", 0.0),
    ] {
        assert_eq!(metrics.sample(series), Some(count), "{series}");
    }
    assert_eq!(
        runs.len(),
        limit,
        "one run per unsettled delivery, then poison"
    );
    let pauses: Vec<Duration> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        pauses.windows(2).all(|w| w[1] > w[0]) && pauses[0] >= Duration::from_millis(250),
        "each run waits longer than the one before: {pauses:?}"
    );
    let letters = backend.inner.dead_letters("q");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].reason,
        format!(
            "poison message: delivered {} times without being settled",
            limit + 1
        )
    );
}

#[tokio::test(start_paused = true)]
async fn an_unpublishable_dead_letter_is_left_to_the_broker_with_a_pause_not_a_hot_loop() {
    let backend = Failing {
        inner: MemoryBackend::new(),
        fail: |_, _| None,
        dead_letters_fail: true,
    };
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let unit = unit(QueueConfig::new("q"), "fatal", |_| {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Outcome::Failed(JobError::fatal("no"))
    });
    let plugins = Plugins::new();
    plugins.install(unit).expect("installed");
    let queue = QueueConfig::new("q");
    backend.inner.declare(&queue).await.expect("declared");
    let payload = RawValue::from_string("{}".to_owned()).expect("json");
    backend
        .inner
        .publish(&Envelope::new("fatal", "q", payload), None)
        .await
        .expect("enqueued");
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(backend.clone(), plugins, WorkerConfig::default()).run(shutdown.clone()),
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    shutdown.cancel();
    worker.await.expect("the worker stops");
    let ready = backend.inner.ready("q") + backend.inner.unacked("q");
    assert_eq!(ready, 1, "the message is never dropped");
    let runs = RUNS.load(Ordering::SeqCst);
    assert!(
        (2..=15).contains(&runs),
        "{runs} runs in {:?}: paused between, never a hot loop",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_timeout_longer_than_the_broker_allows_is_cut_to_fit_under_it() {
    static TIMEOUT_SEEN: Mutex<Option<Duration>> = Mutex::new(None);
    let mut queue = QueueConfig::new("q");
    queue.timeout = Some(Duration::from_secs(3600));
    let unit = native_unit("n", manifest(queue, &["long"]), |job| {
        *TIMEOUT_SEEN.lock().expect("seen") = Some(job.timeout);
        Outcome::Completed { follow_ups: vec![] }
    });
    let config = WorkerConfig {
        broker_consumer_timeout: Duration::from_secs(30 * 60),
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit], config).await;
    h.enqueue("long", json!({"key": "long"})).await;
    h.run_until_idle().await;
    assert_eq!(
        *TIMEOUT_SEEN.lock().expect("seen"),
        Some(Duration::from_secs(27 * 60)),
        "nine tenths of the consumer timeout, not the declared hour"
    );
    h.shutdown().await;
}

#[test]
fn a_timeout_under_the_broker_limit_is_kept_as_declared() {
    let config = WorkerConfig::default();
    assert_eq!(
        config.attempt_timeout(Duration::from_secs(300)),
        Duration::from_secs(300)
    );
    assert_eq!(config.longest_attempt(), Duration::from_secs(27 * 60));
}
