use std::time::Duration;

use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;

use super::*;
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
