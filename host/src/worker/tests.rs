//! Worker mechanics with native handlers; the chapter's behaviour with real plugins is
//! tested end to end in the `tests` crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;

use crate::broker::Backend;
use crate::job::{Invocation, JobSpec, Manifest, Outcome};
use crate::testing::{Harness, native_unit};
use crate::worker::{BoxFuture, Handler, RegistryError, Unit, WorkerConfig};

pub(super) fn manifest(name: &str, queue: QueueConfig, jobs: &[&str]) -> Manifest {
    let jobs = jobs
        .iter()
        .map(|job| JobSpec {
            name: (*job).into(),
            queue: queue.name.clone(),
            retry: None,
            timeout: None,
        })
        .collect();
    Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: name.into(),
        queues: vec![queue],
        jobs,
    }
}

fn retrying_queue(name: &str) -> QueueConfig {
    let mut queue = QueueConfig::new(name);
    queue.retry = RetryPolicy::fixed(3, Duration::from_secs(2));
    queue
}

#[tokio::test(start_paused = true)]
async fn a_body_that_is_not_an_envelope_is_dead_lettered_raw_and_the_worker_keeps_serving() {
    let unit = native_unit("n", manifest("n", QueueConfig::new("q"), &["ok"]), |_| {
        Outcome::Completed { follow_ups: vec![] }
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    h.publish_raw("q", b"{not an envelope");
    h.enqueue("ok", json!({"key": "after"})).await;
    h.run_until_idle().await;
    let dead = h.backend.dead_letters("q");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (
            dead[0].body.as_slice(),
            dead[0].reason.as_str(),
            dead[0].attempts
        ),
        (&b"{not an envelope"[..], "malformed envelope", 0)
    );
    assert_eq!(
        h.log.attempts_of("after"),
        vec![1],
        "the next job still runs"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_type_nobody_serves_is_dead_lettered_with_its_name() {
    let unit = native_unit(
        "n",
        manifest("n", QueueConfig::new("q"), &["known"]),
        |_| Outcome::Completed { follow_ups: vec![] },
    );
    let h = Harness::start([unit], WorkerConfig::default()).await;
    let mut envelope = h.enqueue("known", json!({})).await;
    envelope.job_type = "unknown.Job".into();
    h.backend.publish(&envelope, None).await.expect("publish");
    h.run_until_idle().await;
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(reasons, ["no handler for job type `unknown.Job`"]);
    h.shutdown().await;
}

/// Takes a second of tokio time per job and remembers how many ran at once.
#[derive(Default)]
struct Slow {
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Handler for Slow {
    fn invoke<'a>(&'a self, _job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

/// A harness serving job type `slow` on queue `q` with a [`Slow`] handler.
async fn slow_harness(config: WorkerConfig) -> (Arc<Slow>, Harness) {
    let slow = Arc::new(Slow::default());
    let unit = Unit::new(
        "n",
        "1",
        manifest("n", QueueConfig::new("q"), &["slow"]),
        slow.clone(),
    );
    (slow, Harness::start([unit], config).await)
}

#[tokio::test(start_paused = true)]
async fn no_more_jobs_run_at_once_than_the_concurrency_limit() {
    let (slow, h) = slow_harness(WorkerConfig {
        concurrency: 3,
        ..WorkerConfig::default()
    })
    .await;
    for i in 0..30 {
        h.enqueue("slow", json!({ "i": i })).await;
    }
    h.run_until_idle().await;
    assert_eq!(h.backend.acked("q").len(), 30);
    assert_eq!(
        slow.peak.load(Ordering::SeqCst),
        3,
        "the limit is reached and never exceeded"
    );
    h.shutdown().await;
}

/// Notes the tokio instant each job starts.
#[derive(Default)]
struct Starts(std::sync::Mutex<Vec<tokio::time::Instant>>);

impl Handler for Starts {
    fn invoke<'a>(&'a self, _job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = tokio::time::Instant::now();
            self.0.lock().expect("not poisoned").push(now);
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_queue_whose_slow_jobs_fill_the_host_does_not_hold_back_another_queues_job() {
    // `q`'s prefetch lets its 1 s jobs take every slot at once, so they end together and
    // no shared slot frees for a second: `f`'s job runs in the slot `f` keeps since its
    // first job.
    let (slow, starts) = (Arc::new(Slow::default()), Arc::new(Starts::default()));
    let mut busy = QueueConfig::new("q");
    busy.prefetch = 100;
    let units = [
        Unit::new("n", "1", manifest("n", busy, &["slow"]), slow.clone()),
        Unit::new(
            "m",
            "1",
            manifest("m", QueueConfig::new("f"), &["fast"]),
            starts.clone(),
        ),
    ];
    let h = Harness::start(
        units,
        WorkerConfig {
            concurrency: 4,
            ..WorkerConfig::default()
        },
    )
    .await;
    // `f` has had a job before, so it keeps a slot of its own.
    h.enqueue("fast", json!({})).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    starts.0.lock().expect("not poisoned").clear();
    for i in 0..40 {
        h.enqueue("slow", json!({ "i": i })).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        slow.running.load(Ordering::SeqCst),
        3,
        "every slot but `f`'s own"
    );
    let enqueued = tokio::time::Instant::now();
    h.enqueue("fast", json!({})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = starts.0.lock().expect("not poisoned").clone();
    assert_eq!(
        started.len(),
        1,
        "the fast job started while the slow ones run"
    );
    assert!(started[0] - enqueued < Duration::from_millis(10));
    h.run_until_idle().await;
    assert_eq!(h.backend.acked("q").len(), 40);
    assert_eq!(slow.peak.load(Ordering::SeqCst), 3);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_a_running_job_and_settles_it() {
    let (slow, h) = slow_harness(WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    })
    .await;
    h.enqueue("slow", json!({})).await;
    h.enqueue("slow", json!({})).await;
    while slow.running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let backend = h.backend.clone();
    h.shutdown().await;
    assert_eq!(
        backend.acked("q").len(),
        1,
        "the running job finished and was acked"
    );
    assert_eq!(
        (backend.ready("q"), backend.unacked("q")),
        (1, 0),
        "the other was never pulled"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_still_running_after_the_grace_period_is_redelivered_not_lost() {
    let (slow, h) = slow_harness(WorkerConfig {
        concurrency: 1,
        grace_period: Duration::from_millis(100),
        ..WorkerConfig::default()
    })
    .await;
    h.enqueue("slow", json!({})).await;
    while slow.running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let backend = h.backend.clone();
    h.shutdown().await;
    assert!(backend.acked("q").is_empty());
    assert_eq!(
        (backend.ready("q"), backend.unacked("q")),
        (1, 0),
        "back on the queue for redelivery"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_goes_through_a_hold_queue_and_keeps_the_job_id() {
    let unit = native_unit("n", manifest("n", retrying_queue("q"), &["flaky"]), |job| {
        if job.attempt < 3 {
            Outcome::Failed(JobError::retryable("service is down"))
        } else {
            Outcome::Completed { follow_ups: vec![] }
        }
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    let first = h.enqueue("flaky", json!({"key": "k"})).await;
    h.run_until_idle().await;
    assert_eq!(h.log.attempts_of("k"), vec![1, 2, 3]);
    assert_eq!(h.log.waits_of("k"), vec![Duration::from_secs(2); 2]);
    let acked = h.backend.acked("q");
    assert!(
        acked.iter().all(|e| e.job_id == first.job_id),
        "same job id throughout"
    );
    assert_eq!(
        h.backend.hold_queues_created("q"),
        1,
        "one distinct delay, one hold queue"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_conflicting_unit_is_refused_and_names_both_plugins() {
    let ok = |_: &crate::job::Invocation<'_>| Outcome::Completed { follow_ups: vec![] };
    let h = Harness::start(
        [native_unit(
            "a.wasm",
            manifest("a", QueueConfig::new("q"), &["job"]),
            ok,
        )],
        WorkerConfig::default(),
    )
    .await;
    let err = h
        .install(native_unit(
            "b.wasm",
            manifest("b", QueueConfig::new("q2"), &["job"]),
            ok,
        ))
        .expect_err("claimed");
    assert_eq!(
        err.to_string(),
        "plugin `b` (b.wasm) claims job type `job`, already served by plugin `a` (a.wasm)"
    );
    let mut other = QueueConfig::new("q");
    other.prefetch = 1;
    let err = h
        .install(native_unit("c.wasm", manifest("c", other, &["other"]), ok))
        .expect_err("mismatch");
    assert!(matches!(err, RegistryError::QueueMismatch { .. }), "{err}");
    let mut capped = manifest("d", QueueConfig::new("q"), &["capped"]);
    let limits = jobhost_sdk::limits::QueueLimits {
        concurrency: Some(4),
        rate: None,
    };
    capped.limits.queues.insert("q".to_owned(), limits);
    let err = h
        .install(native_unit("d.wasm", capped, ok))
        .expect_err("a queue declared with other limits");
    assert_eq!(
        err.to_string(),
        "plugin `d` (d.wasm) declares queue `q` differently from plugin `a` (a.wasm)"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_second_file_claiming_a_loaded_plugins_name_is_refused_naming_both_files() {
    let ok = |_: &crate::job::Invocation<'_>| Outcome::Completed { follow_ups: vec![] };
    let h = Harness::start(
        [native_unit(
            "plugins/someone-else.wasm",
            manifest("someone-else", QueueConfig::new("q"), &["job"]),
            ok,
        )],
        WorkerConfig::default(),
    )
    .await;
    let err = h
        .install(native_unit(
            "plugins/innocent.wasm",
            manifest("someone-else", QueueConfig::new("q2"), &["other"]),
            ok,
        ))
        .expect_err("the name is taken");
    assert_eq!(
        err.to_string(),
        "plugin `someone-else` (plugins/innocent.wasm) claims the name of plugin \
         `someone-else` (plugins/someone-else.wasm), which is loaded; a plugin's name is \
         unique among loaded plugins, so rename one of them"
    );
    let registry = h.plugins.current();
    assert_eq!(registry.units().count(), 1, "the first keeps serving alone");
    assert!(registry.route("job").is_some() && registry.route("other").is_none());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_in_flight_finishes_on_the_version_it_started_with() {
    let slow = Arc::new(Slow::default());
    let v1 = Unit::new(
        "p.wasm",
        "v1",
        manifest("p", QueueConfig::new("q"), &["job"]),
        slow.clone(),
    );
    let v2 = native_unit(
        "p.wasm",
        manifest("p", QueueConfig::new("q"), &["job"]),
        |_| Outcome::Failed(JobError::fatal("v2 ran it")),
    );
    let h = Harness::start([v1], WorkerConfig::default()).await;
    h.enqueue("job", json!({"key": "in-flight"})).await;
    while slow.running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    h.install(v2).expect("swap");
    h.enqueue("job", json!({"key": "next"})).await;
    h.run_until_idle().await;

    assert_eq!(h.backend.acked("q").len(), 2, "both deliveries settled");
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(
        reasons,
        ["fatal error: job failed (fatal): v2 ran it"],
        "only the next job ran on v2"
    );
    assert_eq!(
        h.log.calls_of("in-flight")[0].outcome,
        "ok",
        "the in-flight job finished on v1"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_payload_above_the_size_limit_is_dead_lettered_without_running() {
    let unit = native_unit("n", manifest("n", QueueConfig::new("q"), &["job"]), |_| {
        Outcome::Completed { follow_ups: vec![] }
    });
    let config = WorkerConfig {
        max_payload_bytes: 64,
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit], config).await;
    h.enqueue("job", json!({ "blob": "x".repeat(100) })).await;
    h.enqueue("job", json!({ "key": "small" })).await;
    h.run_until_idle().await;
    let reasons = h.dead_letter_reasons("q");
    assert_eq!(
        reasons,
        ["payload too large: 111 bytes, the limit is 64 bytes"]
    );
    assert_eq!(
        h.log.attempts_of("small"),
        vec![1],
        "the worker keeps serving"
    );
    assert_eq!(h.log.calls().len(), 1, "the oversized job never ran");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_a_handler_costs_one_attempt_and_the_worker_keeps_serving() {
    let unit = native_unit("n", manifest("n", QueueConfig::new("q"), &["job"]), |job| {
        assert!(
            !String::from_utf8_lossy(job.payload).contains("boom"),
            "boom"
        );
        Outcome::Completed { follow_ups: vec![] }
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    h.enqueue("job", json!({ "key": "boom" })).await;
    h.enqueue("job", json!({ "key": "fine" })).await;
    h.run_until_idle().await;
    assert_eq!(
        h.dead_letter_reasons("q"),
        [
            "max attempts (1) exhausted after attempt 1: job failed (retryable): the handler panicked: boom"
        ]
    );
    assert_eq!(h.backend.acked("q").len(), 2, "both deliveries settled");
    h.shutdown().await;
}

/// Keeps nothing; a worker given it offers it to the attempts of recording queues.
#[derive(Debug)]
struct Nowhere;

impl crate::job::Recorder for Nowhere {
    fn keep(&self, _recording: crate::job::Recording) {}
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_recorded_unless_its_queue_is_turned_off_and_completed_ones_as_sampled() {
    let offered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let unit = |queue: &str, job: &str| {
        let offered = Arc::clone(&offered);
        native_unit(
            queue,
            manifest(queue, QueueConfig::new(queue), &[job]),
            move |job| {
                let entry = (job.queue.to_owned(), job.record.map(|r| r.completed));
                offered.lock().expect("not poisoned").push(entry);
                Outcome::Completed { follow_ups: vec![] }
            },
        )
    };
    let grants = crate::grants::Grants::parse(
        std::path::Path::new("jobhost.toml"),
        "[queues.quiet]\nrecord = false\n[queues.every]\nrecord_completed = 1.0\n",
    )
    .expect("valid grants");
    let config = WorkerConfig {
        recorder: Some(Arc::new(Nowhere)),
        caps: crate::grants::SharedGrants::new(grants),
        ..WorkerConfig::default()
    };
    let units = [unit("loud", "a"), unit("quiet", "b"), unit("every", "c")];
    let h = Harness::start(units, config).await;
    for job in ["a", "b", "c"] {
        h.enqueue(job, json!({})).await;
    }
    h.run_until_idle().await;
    let mut offered = offered.lock().expect("not poisoned").clone();
    offered.sort();
    assert_eq!(
        offered,
        [
            ("every".to_owned(), Some(true)),
            ("loud".to_owned(), Some(false)),
            ("quiet".to_owned(), None)
        ],
        "a queue records its failed attempts unless turned off, its completed ones as sampled"
    );
    h.shutdown().await;
}
