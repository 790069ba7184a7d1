//! Pause, resume and cancel, given through the memory backend's [`Control`] to workers
//! under tokio's paused clock; two harnesses on one backend are two hosts of one fleet.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobhost_sdk::{QueueConfig, RetryPolicy};
use serde_json::json;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::tests::manifest;
use crate::broker::{Backend, Command, Control, Followed, Follower, MemoryBackend, Order};
use crate::envelope::Envelope;
use crate::grants::{Grants, SharedGrants};
use crate::job::{Invocation, Operator, Outcome};
use crate::metrics::Metrics;
use crate::telemetry::Telemetry;
use crate::testing::Harness;
use crate::worker::{BoxFuture, Fleet, Handler, Unit, WorkerConfig};

/// Runs for `for_` of tokio time, counting the jobs that started and those that finished.
#[derive(Default)]
struct Long {
    for_: Duration,
    started: AtomicUsize,
    finished: AtomicUsize,
}

impl Handler for Long {
    fn invoke<'a>(&'a self, _job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.for_).await;
            self.finished.fetch_add(1, Ordering::SeqCst);
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

/// Queue `q` with 3 attempts, so a job that were retried would show in the hold queues.
fn unit(long: &Arc<Long>) -> Unit {
    unit_fetching(long, QueueConfig::new("q").prefetch)
}

/// [`unit`], its queue's prefetch `prefetch`.
fn unit_fetching(long: &Arc<Long>, prefetch: u16) -> Unit {
    let mut queue = QueueConfig::new("q");
    queue.retry = RetryPolicy::fixed(3, Duration::from_secs(1));
    queue.prefetch = prefetch;
    Unit::new("n", "1", manifest("n", queue, &["long"]), long.clone())
}

fn long(for_: Duration) -> Arc<Long> {
    Arc::new(Long {
        for_,
        ..Long::default()
    })
}

async fn order(backend: &MemoryBackend, command: Command) {
    let order = Order {
        command,
        by: Operator::new("alice@host").expect("an operator"),
        at_ms: 1_796_630_462_000,
    };
    backend
        .order(&order)
        .await
        .expect("the memory backend takes any order");
}

async fn pause(backend: &MemoryBackend) {
    order(backend, Command::Pause { queue: "q".into() }).await;
}

async fn resume(backend: &MemoryBackend) {
    order(backend, Command::Resume { queue: "q".into() }).await;
}

async fn cancel(backend: &MemoryBackend, job_id: Uuid) {
    order(backend, Command::Cancel { job_id }).await;
}

/// Let the worker and its follower run for `time` of tokio time.
async fn pass(time: Duration) {
    tokio::time::sleep(time).await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_queue_runs_nothing_until_resumed_and_its_jobs_keep_their_place() {
    let work = long(Duration::from_millis(10));
    let h = Harness::start([unit(&work)], WorkerConfig::default()).await;
    pass(Duration::from_millis(10)).await;
    pause(&h.backend).await;
    pass(Duration::from_millis(10)).await;
    for key in 0..5 {
        h.enqueue("long", json!({ "key": key })).await;
    }
    pass(Duration::from_secs(60)).await;
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        0,
        "no job runs while paused"
    );
    assert_eq!(h.backend.ready("q"), 5, "the jobs wait on the queue");
    assert_eq!(h.backend.unacked("q"), 0, "none is held by the worker");
    resume(&h.backend).await;
    h.run_until_idle().await;
    assert_eq!(
        work.finished.load(Ordering::SeqCst),
        5,
        "all run after the resume"
    );
    assert!(h.backend.dead_letters("q").is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_starts_on_a_paused_queue_honours_the_pause() {
    let backend = MemoryBackend::new();
    pause(&backend).await;
    let work = long(Duration::from_millis(10));
    let h = Harness::start_on(backend, [unit(&work)], WorkerConfig::default()).await;
    h.enqueue("long", json!({ "key": "waits" })).await;
    pass(Duration::from_secs(60)).await;
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        0,
        "the pause holds from the start"
    );
    resume(&h.backend).await;
    h.run_until_idle().await;
    assert_eq!(h.log.attempts_of("waits"), vec![1]);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_pause_lets_running_jobs_finish_and_gives_back_a_pulled_one_unrun() {
    let work = long(Duration::from_secs(10));
    let config = WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit(&work)], config).await;
    h.enqueue("long", json!({ "key": "first" })).await;
    h.enqueue("long", json!({ "key": "second" })).await;
    pass(Duration::from_secs(1)).await;
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        1,
        "one slot, one job running"
    );
    assert_eq!(
        h.backend.unacked("q"),
        2,
        "the second is pulled, waiting for the slot"
    );
    pause(&h.backend).await;
    pass(Duration::from_secs(30)).await;
    assert_eq!(
        work.finished.load(Ordering::SeqCst),
        1,
        "the running job finished"
    );
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        1,
        "the pulled one did not run"
    );
    assert_eq!(h.backend.ready("q"), 1, "it is back on the queue");
    resume(&h.backend).await;
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("second"),
        vec![1],
        "given back without spending an attempt"
    );
    h.shutdown().await;
}

/// Grants whose file says `text`.
fn grants(text: &str) -> Grants {
    Grants::parse(Path::new("jobhost.toml"), text).expect("valid grants")
}

#[tokio::test(start_paused = true)]
async fn a_queue_the_grants_file_pauses_runs_nothing_whatever_resume_says_until_the_file_lets_it_go()
 {
    let work = long(Duration::from_millis(10));
    let file = SharedGrants::new(grants("[queues.\"q\"]\npaused = true\n"));
    let config = WorkerConfig {
        caps: file.clone(),
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit(&work)], config).await;
    h.enqueue("long", json!({ "key": "waits" })).await;
    pass(Duration::from_secs(60)).await;
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        0,
        "paused from the start"
    );
    pause(&h.backend).await;
    resume(&h.backend).await;
    pass(Duration::from_secs(60)).await;
    assert_eq!(
        work.started.load(Ordering::SeqCst),
        0,
        "a resume order does not undo the file"
    );
    assert_eq!(h.backend.ready("q"), 1, "the job waits on the queue");
    file.replace(grants("[queues.\"q\"]\nconcurrency = 4\n"));
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("waits"),
        vec![1],
        "runs once the file lets go"
    );
    file.replace(grants("[queues.\"q\"]\npaused = true\n"));
    pass(Duration::from_millis(10)).await;
    h.enqueue("long", json!({ "key": "paused again" })).await;
    pass(Duration::from_secs(60)).await;
    assert!(
        h.log.attempts_of("paused again").is_empty(),
        "a reload that pauses holds at once"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_queued_job_cancelled_is_settled_as_cancelled_without_running() {
    let work = long(Duration::from_millis(10));
    let metrics = Metrics::default();
    let config = WorkerConfig {
        telemetry: metrics.telemetry(),
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit(&work)], config).await;
    pass(Duration::from_millis(10)).await;
    pause(&h.backend).await;
    pass(Duration::from_millis(10)).await;
    let doomed = h.enqueue("long", json!({ "key": "doomed" })).await;
    h.enqueue("long", json!({ "key": "spared" })).await;
    cancel(&h.backend, doomed.job_id).await;
    resume(&h.backend).await;
    h.run_until_idle().await;
    assert!(h.log.attempts_of("doomed").is_empty(), "it never ran");
    assert_eq!(h.log.attempts_of("spared"), vec![1]);
    assert_eq!(
        h.dead_letter_reasons("q"),
        ["cancelled by alice@host at 2026-12-07T08:01:02Z"],
        "visible in the dead letters with who and when"
    );
    let metrics = metrics.encode();
    assert!(
        metrics.contains(r#"jobhost_jobs_total{queue="q",job_type="long",outcome="cancelled"} 1"#),
        "{metrics}"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_held_job_cancelled_is_settled_as_cancelled_when_its_delay_is_over() {
    let work = long(Duration::from_millis(10));
    let h = Harness::start([unit(&work)], WorkerConfig::default()).await;
    let payload = RawValue::from_string(r#"{"key":"held"}"#.into()).expect("JSON");
    let held = Envelope::new("long", "q", payload);
    let delay = crate::policy::Granularity::default()
        .round(Duration::from_secs(30))
        .expect("fits a hold queue");
    h.backend.publish(&held, Some(delay)).await.expect("held");
    cancel(&h.backend, held.job_id).await;
    h.run_until_idle().await;
    assert!(h.log.attempts_of("held").is_empty(), "it never ran");
    assert_eq!(h.dead_letter_reasons("q").len(), 1);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_running_job_cancelled_is_interrupted_at_once_and_not_retried() {
    let work = long(Duration::from_secs(3600));
    let h = Harness::start([unit(&work)], WorkerConfig::default()).await;
    let job = h.enqueue("long", json!({ "key": "runaway" })).await;
    pass(Duration::from_secs(5)).await;
    assert_eq!(work.started.load(Ordering::SeqCst), 1, "it runs");
    let cancelled_at = tokio::time::Instant::now();
    cancel(&h.backend, job.job_id).await;
    h.run_until_idle().await;
    assert!(
        cancelled_at.elapsed() < Duration::from_millis(100),
        "interrupted at once, not after its hour: {:?}",
        cancelled_at.elapsed()
    );
    assert_eq!(
        work.finished.load(Ordering::SeqCst),
        0,
        "the attempt was dropped"
    );
    assert!(h.backend.deferred("q").is_empty(), "no retry");
    assert_eq!(
        h.dead_letter_reasons("q"),
        ["cancelled by alice@host at 2026-12-07T08:01:02Z"]
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_the_job_on_whichever_host_of_the_fleet_runs_it() {
    let backend = MemoryBackend::new();
    let (one, two) = (
        long(Duration::from_secs(3600)),
        long(Duration::from_secs(3600)),
    );
    let config = WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    };
    // One job per host at a time, so that the second job goes to the second host.
    let first = Harness::start_on(backend.clone(), [unit_fetching(&one, 1)], config.clone()).await;
    let second = Harness::start_on(backend.clone(), [unit_fetching(&two, 1)], config).await;
    let a = first.enqueue("long", json!({ "key": "a" })).await;
    let b = first.enqueue("long", json!({ "key": "b" })).await;
    pass(Duration::from_secs(1)).await;
    assert_eq!(
        one.started.load(Ordering::SeqCst) + two.started.load(Ordering::SeqCst),
        2,
        "each host runs one"
    );
    cancel(&backend, a.job_id).await;
    cancel(&backend, b.job_id).await;
    first.run_until_idle().await;
    assert_eq!(backend.dead_letters("q").len(), 2, "both interrupted");
    first.shutdown().await;
    second.shutdown().await;
}

/// A broker whose pause mark and order stream the test sets by hand, so that an order can
/// be missed, as while a host's connection is down.
#[derive(Clone)]
struct Scripted {
    paused: Arc<std::sync::atomic::AtomicBool>,
    followed: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Followed>>>,
}

struct ScriptedFollower(Scripted);

impl Follower for ScriptedFollower {
    async fn next(&mut self) -> Option<Followed> {
        self.0.followed.lock().await.recv().await
    }
}

impl Control for Scripted {
    type Follower = ScriptedFollower;

    async fn order(&self, _order: &Order) -> Result<(), crate::broker::BrokerError> {
        unreachable!("the test gives no order")
    }

    async fn is_paused(&self, _queue: &str) -> Result<bool, crate::broker::BrokerError> {
        Ok(self.paused.load(Ordering::SeqCst))
    }

    async fn follow(&self) -> Result<ScriptedFollower, crate::broker::BrokerError> {
        Ok(ScriptedFollower(self.clone()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_pause_whose_order_was_missed_is_learnt_when_the_follower_joins_again() {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    let broker = Scripted {
        paused: Arc::default(),
        followed: Arc::new(tokio::sync::Mutex::new(receive)),
    };
    let fleet = Fleet::new(broker.clone(), Telemetry::none());
    let stop = tokio_util::sync::CancellationToken::new();
    let following = {
        let (fleet, broker, stop) = (fleet.clone(), broker.clone(), stop.clone());
        tokio::spawn(async move { fleet.follow(&broker, stop).await })
    };
    send.send(Followed::Joined).expect("the follower listens");
    assert!(!fleet.learn("q").await.expect("scripted"), "not paused yet");
    pass(Duration::from_millis(1)).await;

    // Paused while this host's connection was down: the mark is set, the order missed.
    broker.paused.store(true, Ordering::SeqCst);
    pass(Duration::from_secs(1)).await;
    assert!(!fleet.is_paused("q"), "nothing told the host yet");
    send.send(Followed::Joined).expect("the follower listens");
    pass(Duration::from_millis(1)).await;
    assert!(fleet.is_paused("q"), "the rejoin looked at the mark");
    stop.cancel();
    following.await.expect("following ends at the stop");
}
