use std::time::Duration;

use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;

use super::*;
use crate::broker::{EXCERPT_MAX, LISTING_MAX_BYTES};
use crate::policy::Granularity;

fn queue(name: &str) -> QueueConfig {
    let mut config = QueueConfig::new(name);
    config.prefetch = 2;
    config.max_priority = 5;
    config
}

fn hold(delay: Duration) -> HoldDelay {
    Granularity::new(Duration::from_millis(1))
        .round(delay)
        .expect("fits a hold queue")
}

fn job(queue: &str, key: &str) -> Envelope {
    let payload = RawValue::from_string(format!(r#"{{"key":"{key}"}}"#)).expect("json");
    Envelope::new("t", queue, payload)
}

fn key_of(envelope: &Envelope) -> String {
    serde_json::from_str::<serde_json::Value>(envelope.payload.get()).expect("json")["key"]
        .as_str()
        .expect("key")
        .to_owned()
}

async fn declared(name: &str) -> MemoryBackend {
    let backend = MemoryBackend::new();
    backend.declare(&queue(name)).await.expect("declare");
    backend
}

#[tokio::test(start_paused = true)]
async fn higher_priorities_are_delivered_first_and_equal_priorities_in_order() {
    let backend = declared("q").await;
    for (key, priority) in [("a", 0), ("b", 0), ("c", 5), ("d", 9)] {
        let mut envelope = job("q", key);
        envelope.priority = priority;
        backend.publish(&envelope, None).await.expect("publish");
    }
    let order: Vec<String> = backend.pending("q").iter().map(key_of).collect();
    assert_eq!(
        order,
        ["c", "d", "a", "b"],
        "priority 9 is capped at the queue's 5, then arrival"
    );
}

#[tokio::test(start_paused = true)]
async fn a_consumer_holds_no_more_than_its_prefetch() {
    let backend = declared("q").await;
    for key in ["a", "b", "c"] {
        backend
            .publish(&job("q", key), None)
            .await
            .expect("publish");
    }
    let mut consumer = backend.consume(&queue("q")).await.expect("consume");
    let first = consumer.next().await.expect("first");
    let _second = consumer.next().await.expect("second");
    let third = tokio::time::timeout(Duration::from_secs(1), consumer.next()).await;
    assert!(
        third.is_err(),
        "a third delivery must wait for a settlement"
    );
    first.ack().await.expect("ack");
    let third = consumer.next().await.expect("third after an ack");
    assert_eq!(
        key_of(&Envelope::decode(third.body()).expect("envelope")),
        "c"
    );
    assert_eq!(backend.acked("q").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_publish_waits_in_its_hold_queue_for_exactly_the_delay() {
    let backend = declared("q").await;
    backend
        .publish(&job("q", "a"), Some(hold(Duration::from_secs(4))))
        .await
        .expect("publish");
    assert_eq!(
        backend.hold_queues("q"),
        vec![("q.deferred.4000".to_owned(), Duration::from_secs(4))]
    );
    assert!(
        backend.pending("q").is_empty(),
        "nothing on the work queue while held"
    );
    assert_eq!(backend.waiting("q"), 1);

    tokio::time::sleep(Duration::from_millis(3999)).await;
    assert!(backend.pending("q").is_empty(), "not released early");
    tokio::time::sleep(Duration::from_millis(1)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        backend.pending("q").len(),
        1,
        "released onto the work queue at the TTL"
    );
    assert_eq!(backend.waiting("q"), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unused_hold_queue_expires_after_twice_its_ttl() {
    let backend = declared("q").await;
    backend
        .publish(&job("q", "a"), Some(hold(Duration::from_secs(2))))
        .await
        .expect("publish");
    tokio::time::sleep(Duration::from_millis(3999)).await;
    assert_eq!(backend.hold_queues("q").len(), 1);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(backend.hold_queues("q").is_empty(), "x-expires is 2 * ttl");
    assert_eq!(backend.hold_queues_created("q"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_delivery_dropped_unsettled_returns_to_the_queue_as_redelivered() {
    let backend = declared("q").await;
    backend
        .publish(&job("q", "a"), None)
        .await
        .expect("publish");
    let mut consumer = backend.consume(&queue("q")).await.expect("consume");
    let delivery = consumer.next().await.expect("delivery");
    assert!(!delivery.redelivered());
    assert_eq!(backend.unacked("q"), 1);
    drop(delivery);
    assert_eq!(backend.unacked("q"), 0);
    let again = consumer.next().await.expect("redelivery");
    assert!(again.redelivered(), "a redelivery is flagged");
}

#[tokio::test(start_paused = true)]
async fn a_consumer_waits_for_a_message_published_later() {
    let backend = declared("q").await;
    let mut consumer = backend.consume(&queue("q")).await.expect("consume");
    let publisher = backend.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        publisher
            .publish(&job("q", "late"), None)
            .await
            .expect("publish");
    });
    let delivery = consumer.next().await.expect("delivery");
    assert_eq!(
        key_of(&Envelope::decode(delivery.body()).expect("envelope")),
        "late"
    );
}

#[tokio::test(start_paused = true)]
async fn publishing_to_an_undeclared_queue_is_an_error_not_a_silent_loss() {
    let backend = MemoryBackend::new();
    let err = backend
        .publish(&job("nowhere", "a"), None)
        .await
        .expect_err("unroutable");
    assert!(
        matches!(err, BrokerError::UnknownQueue(ref q) if q == "nowhere"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn dead_letters_keep_the_raw_body_and_the_reason() {
    let backend = declared("q").await;
    let letter = DeadLetterOut {
        queue: "q",
        body: b"not json",
        reason: "malformed envelope",
        attempts: 0,
        trace: None,
    };
    backend.dead_letter(letter).await.expect("dead letter");
    let dead = backend.dead_letters("q");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].body.as_slice(), dead[0].reason.as_str()),
        (&b"not json"[..], "malformed envelope")
    );
    assert!(dead[0].envelope().is_none());
}

#[tokio::test(start_paused = true)]
async fn the_embedded_backend_keeps_nothing_but_what_its_queues_hold() {
    let backend = MemoryBackend::embedded();
    backend.declare(&queue("q")).await.expect("declared");
    let mut consumer = backend.consume(&queue("q")).await.expect("consumer");
    for n in 0..100 {
        backend
            .publish(
                &job("q", &format!("held-{n}")),
                Some(hold(Duration::from_millis(n + 1))),
            )
            .await
            .expect("publish");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..100 {
        consumer
            .next()
            .await
            .expect("a delivery")
            .ack()
            .await
            .expect("ack");
    }
    assert!(backend.acked("q").is_empty(), "no record of acked jobs");
    assert!(backend.deferred("q").is_empty(), "no record of held jobs");
    tokio::time::sleep(Duration::from_secs(1)).await;
    backend
        .publish(&job("q", "last"), Some(hold(Duration::from_secs(5))))
        .await
        .expect("publish");
    assert_eq!(
        backend.hold_queues_created("q"),
        1,
        "expired hold queues are forgotten"
    );
}

async fn dead_letter(backend: &MemoryBackend, body: &[u8]) {
    let letter = DeadLetterOut {
        queue: "q",
        body,
        reason: "fatal error: no",
        attempts: 1,
        trace: None,
    };
    backend.dead_letter(letter).await.expect("dead letter");
}

fn large_job(size: usize) -> Envelope {
    let payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(size));
    Envelope::new("t", "q", RawValue::from_string(payload).expect("json"))
}

#[tokio::test(start_paused = true)]
async fn a_listing_shows_excerpts_under_its_byte_cap_and_leaves_the_letters_as_they_were() {
    let backend = declared("q").await;
    let jobs: Vec<Envelope> = (0..3).map(|_| large_job(2_000_000)).collect();
    for job in &jobs {
        dead_letter(&backend, &job.encode()).await;
    }
    let before = backend.dead_letters("q");
    let listed = backend.list_dead("q", 100).await.expect("listed");
    assert_eq!(
        listed.letters.iter().map(|l| l.job_id).collect::<Vec<_>>(),
        jobs.iter().map(|j| Some(j.job_id)).collect::<Vec<_>>()
    );
    let letter = &listed.letters[0];
    assert!(letter.body_cut && letter.body.len() <= EXCERPT_MAX + crate::text::MARKER_MAX);
    assert_eq!(letter.body_bytes, jobs[0].encode().len() as u64);
    assert_eq!(letter.reason.as_deref(), Some("fatal error: no"));
    assert_eq!(
        letter.headers.get("x-original-queue").map(String::as_str),
        Some("q"),
        "the headers RabbitMQ would carry"
    );
    assert_eq!(backend.dead_letters("q"), before, "every letter, in order");

    for _ in 0..1_000 {
        dead_letter(&backend, &[b'a'; 4_000]).await;
    }
    let listed = backend.list_dead("q", 1_000).await.expect("listed");
    let answer = serde_json::to_vec(&listed).expect("serializes").len();
    assert!(answer <= LISTING_MAX_BYTES, "{answer} bytes");
    assert!(listed.capped, "a thousand letters do not fit");
    assert_eq!(listed.present, 1_003);
    assert_eq!(listed.left_out, 1_003 - listed.letters.len() as u64);
    assert_eq!(
        listed.letters[0].job_id,
        Some(jobs[0].job_id),
        "oldest first"
    );
}

#[tokio::test(start_paused = true)]
async fn a_listing_of_more_than_its_limit_moves_the_letters_it_read_behind_the_others() {
    let backend = declared("q").await;
    let jobs: Vec<Envelope> = (0..5).map(|n| job("q", &n.to_string())).collect();
    for job in &jobs {
        dead_letter(&backend, &job.encode()).await;
    }
    let ids = |list: &DeadLetterList| list.letters.iter().map(|l| l.job_id).collect::<Vec<_>>();
    let first = backend.list_dead("q", 3).await.expect("listed");
    assert_eq!(ids(&first), [0, 1, 2].map(|n| Some(jobs[n].job_id)));
    assert_eq!(first.left_out, 2);
    let next = backend.list_dead("q", 3).await.expect("listed");
    assert_eq!(
        ids(&next),
        [3, 4, 0].map(|n| Some(jobs[n].job_id)),
        "as on RabbitMQ, the next listing shows the following letters"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replay_streams_envelopes_back_and_keeps_the_rest_in_order_and_a_take_finds_one_job() {
    let backend = declared("q").await;
    let (a, b) = (job("q", "a"), job("q", "b"));
    dead_letter(&backend, b"first stray").await;
    dead_letter(&backend, &a.encode()).await;
    dead_letter(&backend, b"second stray").await;
    dead_letter(&backend, &b.encode()).await;

    assert!(
        backend
            .take_dead("q", b.job_id, false)
            .await
            .expect("taken")
    );
    assert!(
        !backend
            .take_dead("q", b.job_id, false)
            .await
            .expect("looked")
    );
    let replayed = backend.replay_dead("q").await.expect("replayed");
    assert_eq!(
        replayed,
        Replayed {
            replayed: 1,
            skipped: 2
        }
    );
    assert_eq!(
        backend
            .pending("q")
            .iter()
            .map(|e| (e.job_id, e.attempt))
            .collect::<Vec<_>>(),
        [(a.job_id, 1)]
    );
    let left: Vec<Vec<u8>> = backend
        .dead_letters("q")
        .into_iter()
        .map(|l| l.body)
        .collect();
    assert_eq!(left, [b"first stray".to_vec(), b"second stray".to_vec()]);
    assert_eq!(backend.purge_dead("q").await.expect("purged"), 2);
    assert!(backend.dead_letters("q").is_empty());
}
