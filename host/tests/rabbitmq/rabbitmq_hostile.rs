//! Hostile messages on the real broker, published by a plain AMQP client: each ends in a
//! dead letter or completes, on one connection, while ordinary jobs behind it complete.
//! And publishes to queues deleted behind the host's back: nothing returned is reported
//! as published.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobhost::broker::{Backend, BrokerError, DeadLetterOut};
use jobhost::envelope::Envelope;
use jobhost::job::Outcome;
use jobhost::testing::native_unit;
use jobhost::worker::Plugins;
use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use lapin::options::QueueDeleteOptions;
use serde_json::value::RawValue;
use tokio::task::JoinSet;

use crate::support::worker::{one_job, serve_until};
use crate::support::{
    Cleanup, PATIENCE, backend, connections_named, hold, publish_plainly, raw_channel, ready,
    take_death_reasons, unique, within,
};

fn envelope(job_type: &str, queue: &str, payload: &str) -> Envelope {
    let payload = RawValue::from_string(payload.to_owned()).expect("json");
    Envelope::new(job_type, queue, payload)
}

/// Second attempts of the job whose envelope names another queue.
static STRAY_DONE: AtomicUsize = AtomicUsize::new(0);

/// What the native handler does with a payload: `{"do": ...}`.
fn hostile_handler(payload: &[u8], attempt: u32) -> Outcome {
    let value: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
    match value["do"].as_str().unwrap_or("ok") {
        "undecodable" => {
            Outcome::Undecodable(format!("invalid type: string \"{}\"", "y".repeat(200_000)))
        }
        "defer-forever" => {
            Outcome::Failed(JobError::deferred(Duration::from_millis(3_000_000_000)))
        }
        "fail-once" if attempt == 1 => Outcome::Failed(JobError::retryable("once")),
        "fail-once" => {
            STRAY_DONE.fetch_add(1, Ordering::SeqCst);
            Outcome::Completed { follow_ups: vec![] }
        }
        _ => Outcome::Completed { follow_ups: vec![] },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hostile_message_of_each_kind_ends_on_one_connection_while_the_jobs_behind_complete() {
    let connection_name = unique("hostile");
    let Some(backend) = backend(&connection_name).await.map(Arc::new) else {
        return;
    };
    let name = unique("hostile");
    let _cleanup = Cleanup::new(&[&name]);
    let mut queue = QueueConfig::new(&name);
    queue.retry = RetryPolicy::fixed(3, Duration::from_millis(100));
    let manifest = one_job("hostile", &queue, "hostile.Job");
    let plugins = Plugins::new();
    plugins
        .install(native_unit("hostile", manifest, |job| {
            hostile_handler(job.payload, job.attempt)
        }))
        .expect("installed");
    backend.declare(&queue).await.expect("declared");
    let channel = raw_channel().await;
    let hostile = [
        envelope(&"x".repeat(200_000), &name, "{}"),
        envelope("hostile.Job", &name, r#"{"do":"undecodable"}"#),
        envelope("hostile.Job", &name, r#"{"do":"defer-forever"}"#),
        envelope(
            "hostile.Job",
            "no.such.queue",
            r#"{"do":"fail-once","key":"stray"}"#,
        ),
    ];
    for message in &hostile {
        publish_plainly(&channel, &name, &message.encode()).await;
    }
    const ORDINARY: u32 = 200;
    for n in 0..ORDINARY {
        let job = envelope("hostile.Job", &name, &format!(r#"{{"key":{n}}}"#));
        publish_plainly(&channel, &name, &job.encode()).await;
    }

    let dead = format!("{name}.dead");
    serve_until(
        Arc::clone(&backend),
        plugins,
        PATIENCE * 3,
        "three dead letters and an empty queue",
        || async {
            ready(&channel, &dead).await == 3
                && ready(&channel, &name).await == 0
                && STRAY_DONE.load(Ordering::SeqCst) == 1
        },
    )
    .await;

    let mut reasons = take_death_reasons(&channel, &name).await;
    for reason in &reasons {
        assert!(
            reason.len() < 4096,
            "a bounded reason, not {} bytes",
            reason.len()
        );
    }
    reasons.sort();
    assert!(
        reasons[0].starts_with("decode error: invalid type: string \"yyy"),
        "{}",
        reasons[0]
    );
    assert!(reasons[0].ends_with("bytes in all)"), "{}", reasons[0]);
    assert!(
        reasons[1].starts_with("fatal error: job failed (fatal): the deferral of 3000000s exceeds"),
        "{}",
        reasons[1]
    );
    assert!(
        reasons[2].starts_with("no handler for job type `xxx"),
        "{}",
        reasons[2]
    );
    assert_eq!(
        connections_named(&connection_name).len(),
        1,
        "one connection throughout: the broker never closed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returned_publishes_are_never_reported_as_published_among_many_concurrent_ones() {
    let Some(backend) = backend(&unique("returns")).await.map(Arc::new) else {
        return;
    };
    let name = unique("returns");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");
    let nowhere = unique("nowhere");
    let mut publishes = JoinSet::new();
    for n in 0..400 {
        let backend = Arc::clone(&backend);
        let queue = if n % 2 == 0 {
            name.clone()
        } else {
            nowhere.clone()
        };
        publishes.spawn(async move {
            let job = envelope("t", &queue, &n.to_string());
            (queue, backend.publish(&job, None).await)
        });
    }
    let results = within(PATIENCE, "400 concurrent publishes", publishes.join_all()).await;
    for (queue, result) in &results {
        if queue == &name {
            assert!(
                result.is_ok(),
                "a routable publish is confirmed: {result:?}"
            );
        } else {
            assert!(
                matches!(result, Err(BrokerError::Unroutable { .. })),
                "an unroutable publish is returned: {result:?}"
            );
        }
    }
    assert_eq!(ready(&raw_channel().await, &name).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_and_retries_reach_queues_deleted_behind_the_hosts_back() {
    let Some(backend) = backend(&unique("deleted")).await.map(Arc::new) else {
        return;
    };
    let name = unique("deleted");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");
    let delay = hold(Duration::from_secs(60));
    let hold_queue = format!("{name}.deferred.60000");
    backend
        .publish(&envelope("t", &name, "0"), Some(delay))
        .await
        .expect("the hold queue is declared and remembered");
    let channel = raw_channel().await;
    for queue in [format!("{name}.dead"), hold_queue.clone()] {
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("deleted");
    }

    let mut settles = JoinSet::new();
    for n in 0..300 {
        let (backend, name) = (Arc::clone(&backend), name.clone());
        settles.spawn(async move {
            let job = envelope("t", &name, &n.to_string());
            match n % 3 {
                0 => backend.publish(&job, None).await,
                1 => backend.publish(&job, Some(delay)).await,
                _ => {
                    let body = job.encode();
                    let letter = DeadLetterOut {
                        queue: &name,
                        body: &body,
                        reason: "fatal error: test",
                        attempts: 1,
                        trace: None,
                    };
                    backend.dead_letter(letter).await
                }
            }
        });
    }
    let results = within(
        PATIENCE * 2,
        "300 concurrent settlements",
        settles.join_all(),
    )
    .await;
    assert!(
        results.iter().all(Result::is_ok),
        "each is published once its queue is declared again: {:?}",
        results.iter().filter(|r| r.is_err()).collect::<Vec<_>>()
    );
    assert_eq!(
        ready(&channel, &name).await,
        100,
        "every job on the work queue"
    );
    assert_eq!(
        ready(&channel, &hold_queue).await,
        100,
        "every retry in its hold queue"
    );
    assert_eq!(
        ready(&channel, &format!("{name}.dead")).await,
        100,
        "every dead letter"
    );
    let _ = channel
        .queue_delete(hold_queue.as_str().into(), QueueDeleteOptions::default())
        .await;
}

#[tokio::test]
async fn a_dead_letter_for_a_queue_never_declared_is_a_permanent_unroutable_error() {
    let Some(backend) = backend(&unique("unknown")).await else {
        return;
    };
    let body = b"raw".to_vec();
    let queue = unique("never-declared");
    let error = backend
        .dead_letter(DeadLetterOut {
            queue: &queue,
            body: &body,
            reason: "r",
            attempts: 0,
            trace: None,
        })
        .await
        .expect_err("nothing to route to");
    assert!(matches!(error, BrokerError::Unroutable { .. }), "{error}");
    assert!(error.is_permanent());
}
