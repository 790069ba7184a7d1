//! The worker on RabbitMQ with real plugins: the chapter's flaky email with the broker
//! doing the waiting, a retry that outlives its worker, and queuey producers feeding a
//! jobhost plugin. Each test owns the fixture queues it uses and deletes them before and
//! after, so a failed earlier run leaves nothing behind.

use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::RabbitMqOptions;
use lapin::types::AMQPValue;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support;
use crate::support::worker::{Running, eventually, fixture_queues, publish};
use crate::support::{PATIENCE, backend, backend_with, raw_channel, ready, take, unique, within};

fn unacked(queue: &str) -> u32 {
    let listing = support::rabbitmqctl(&[
        "list_queues",
        "name",
        "messages_unacknowledged",
        "--no-table-headers",
        "--silent",
    ]);
    listing
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{queue}\t")))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flaky_email_retries_through_hold_queues_while_the_worker_holds_nothing() {
    let _queues =
        fixture_queues(&["test.emails", "test.bare", "test.jittered", "test.urgent"]).await;
    let Some(backend) = backend(&unique("flaky")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "scripted").await;
    let flaky = publish(
        &backend,
        "scripted.SendEmail",
        "test.emails",
        json!({"key": "flaky@example.com", "fail_times": 2}),
    )
    .await;
    publish(
        &backend,
        "scripted.HastyEmail",
        "test.emails",
        json!({"key": "down@example.com", "fail_times": 9}),
    )
    .await;
    publish(
        &backend,
        "scripted.PatientEmail",
        "test.emails",
        json!({"key": "patient@example.com", "fail_times": 1}),
    )
    .await;

    // The patient job waits 3s in `test.emails.deferred.3000`: long enough to look.
    let hold = raw_channel().await;
    eventually(
        PATIENCE,
        "the patient job to wait in its hold queue",
        || async { ready(&hold, "test.emails.deferred.3000").await == 1 },
    )
    .await;
    assert_eq!(
        running.log.attempts_of("patient@example.com"),
        vec![1],
        "still waiting"
    );
    assert_eq!(
        unacked("test.emails"),
        0,
        "the worker holds nothing while a retry waits"
    );

    let log = running.log.clone();
    eventually(
        Duration::from_secs(30),
        "the flaky email's third attempt",
        || async {
            log.attempts_of("flaky@example.com").len() == 3
                && log.attempts_of("patient@example.com").len() == 2
        },
    )
    .await;
    assert_eq!(log.attempts_of("flaky@example.com"), vec![1, 2, 3]);
    assert!(
        log.calls_of("flaky@example.com")
            .iter()
            .all(|c| c.job_id == flaky.job_id),
        "one job id"
    );
    let waits = log.waits_of("flaky@example.com");
    assert!(
        waits[0] >= Duration::from_secs(1) && waits[1] >= Duration::from_secs(2),
        "the broker waited: {waits:?}"
    );

    let dead = within(PATIENCE, "the dead letter", async {
        loop {
            if let Some(dead) = take(&hold, "test.emails.dead").await {
                return dead;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let header = |key: &str| {
        dead.properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get(key).cloned())
    };
    assert_eq!(
        header("x-death-reason"),
        Some(AMQPValue::LongString(
            "max attempts (2) exhausted after attempt 2: job failed (retryable): service is down"
                .into()
        ))
    );
    running.stop().await;
    backend.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_waiting_in_the_broker_survives_a_worker_restart_and_completes_once() {
    let _queues =
        fixture_queues(&["test.emails", "test.bare", "test.jittered", "test.urgent"]).await;
    let Some(first) = backend(&unique("restart-1")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(first.clone(), "scripted").await;
    publish(
        &first,
        "scripted.BareJobWithRetry",
        "test.bare",
        json!({"key": "survivor", "fail_times": 1}),
    )
    .await;
    let hold = raw_channel().await;
    eventually(PATIENCE, "the retry to wait in its hold queue", || async {
        ready(&hold, "test.bare.deferred.5000").await == 1
    })
    .await;
    let before = running.stop().await;
    first.close().await;
    assert_eq!(before.attempts_of("survivor"), vec![1]);

    let Some(second) = backend(&unique("restart-2")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(second.clone(), "scripted").await;
    let log = running.log.clone();
    eventually(
        Duration::from_secs(20),
        "the retry on the new worker",
        || async { !log.attempts_of("survivor").is_empty() },
    )
    .await;
    eventually(PATIENCE, "the queue to drain", || async {
        ready(&hold, "test.bare").await == 0
    })
    .await;
    let after = running.stop().await;
    second.close().await;
    assert_eq!(
        after.attempts_of("survivor"),
        vec![2],
        "completed once, on its second attempt"
    );
    assert_eq!(after.calls_of("survivor")[0].outcome, "ok");
}

/// The noop plugin's job, as a queuey application defines it.
#[derive(Debug, Serialize, Deserialize)]
struct Noop {
    key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NoopQueues {
    Noop,
}

impl queuey::QueueSet for NoopQueues {
    fn all() -> &'static [Self] {
        &[Self::Noop]
    }

    fn name(&self) -> &'static str {
        "test.noop"
    }

    fn config(&self) -> queuey::QueueConfig {
        queuey::QueueConfig::new("test.noop")
    }
}

impl queuey::Job for Noop {
    type Queue = NoopQueues;
    const NAME: &'static str = "noop.Noop";
    const QUEUE: NoopQueues = NoopQueues::Noop;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_a_queuey_producer_enqueues_run_in_a_jobhost_plugin() {
    let _queues = fixture_queues(&["test.noop"]).await;
    let Some(backend) = backend(&unique("queuey-producer")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "noop").await;
    let queuey_backend = queuey::RabbitMqBackend::connect(&support::amqp_url())
        .await
        .expect("queuey connects");
    let producer = queuey::Producer::<NoopQueues, _>::new(std::sync::Arc::new(queuey_backend))
        .await
        .expect("queuey declares the same queue");
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            producer
                .enqueue(&Noop {
                    key: format!("from-queuey-{i}"),
                })
                .await
                .expect("enqueued"),
        );
    }

    let log = running.log.clone();
    eventually(PATIENCE, "queuey's jobs to run", || async {
        log.calls().len() == 20
    })
    .await;
    let mut ran: Vec<uuid::Uuid> = log.calls().iter().map(|c| c.job_id).collect();
    ran.sort();
    ids.sort();
    assert_eq!(ran, ids, "every queuey job ran once, under queuey's job id");
    assert!(
        log.calls()
            .iter()
            .all(|c| c.job_type == "noop.Noop" && c.attempt == 1 && c.outcome == "ok")
    );
    running.stop().await;
    backend.close().await;
}

/// The noop plugin's queue and job as a native application shares them with the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, jobhost_sdk::Queues)]
#[queues(prefix = "test")]
enum SharedQueues {
    Noop,
}

#[derive(Debug, Serialize, Deserialize, jobhost_sdk::Job)]
#[job(name = "noop.Noop", queue = SharedQueues::Noop)]
struct SharedNoop {
    key: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_producer_enqueues_now_later_and_deferred_through_the_broker() {
    let _queues = fixture_queues(&["test.noop"]).await;
    let Some(backend) = backend(&unique("producer")).await.map(Arc::new) else {
        return;
    };
    let producer = jobhost::producer::Producer::<SharedQueues, _>::new(backend.clone())
        .await
        .expect("declares");
    let running = Running::start(backend.clone(), "noop").await;
    let now = producer
        .enqueue(&SharedNoop { key: "now".into() })
        .await
        .expect("enqueue");
    let later = producer
        .enqueue_after(
            &SharedNoop {
                key: "later".into(),
            },
            Duration::from_secs(1),
        )
        .await
        .expect("enqueue_after");
    let deferred = producer
        .defer(
            &SharedNoop {
                key: "deferred".into(),
            },
            Duration::from_secs(1),
        )
        .await
        .expect("defer");

    let log = running.log.clone();
    eventually(PATIENCE, "the three jobs to run", || async {
        log.calls().len() == 3
    })
    .await;
    let calls = log.calls();
    let find = |key: &str| {
        log.calls_of(key)
            .pop()
            .unwrap_or_else(|| panic!("{key} ran"))
    };
    assert_eq!(
        (
            find("now").job_id,
            find("later").job_id,
            find("deferred").job_id
        ),
        (now, later, deferred)
    );
    assert_eq!(calls[0].job_id, now, "the job enqueued now runs first");
    assert_eq!(
        find("deferred").priority,
        10,
        "a producer's deferral returns at the queue's top priority"
    );
    assert_eq!(find("later").priority, 0);
    running.stop().await;
    backend.close().await;
}

/// A queue of short jobs runs them in its consume loop (`worker::inline`); one that turns
/// out to keep the CPU busy must not hold up the jobs behind it for longer than the
/// engine's epoch tick, where its guest yields and it continues as a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_behind_a_cpu_heavy_one_on_their_queue_run_while_it_still_runs() {
    let _queues =
        fixture_queues(&["test.emails", "test.bare", "test.jittered", "test.urgent"]).await;
    // A limit that a debug build's short jobs keep too: 50 µs is for release builds.
    let options = RabbitMqOptions::default()
        .connection_name(unique("heavy"))
        .inline_limit(Some(Duration::from_millis(20)));
    let Some(backend) = backend_with(options).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "scripted").await;
    let short = |n: usize| format!("short-{n}@example.com");
    let bare = |payload| publish(&backend, "scripted.BareJob", "test.bare", payload);
    // Short jobs first, so the queue counts as one of short jobs when the heavy one comes.
    for n in 0..10 {
        bare(json!({"key": short(n)})).await;
    }
    bare(json!({"key": "heavy@example.com", "busy_ms": 6_000})).await;
    for n in 10..30 {
        bare(json!({"key": short(n)})).await;
    }

    let log = running.log.clone();
    eventually(PATIENCE, "every short job to run", || async {
        (0..30).all(|n| log.attempts_of(&short(n)) == vec![1])
    })
    .await;
    // Its log lines come out when it ends; the broker tells that it was delivered and is
    // not settled yet.
    assert_eq!(
        unacked("test.bare"),
        1,
        "the heavy job still runs, 6 s of CPU, while the 20 short jobs published after it have run"
    );
    running.stop().await;
    backend.close().await;
}
