//! The typed producer on the memory backend: what it publishes, delays, expiries and unique keys too. What it refuses to compile
//! is the `compile_fail` example in the `producer` module's doc.

use std::time::Duration;

use jobhost::broker::{BrokerError, MemoryBackend};
use jobhost::job::Deadline;
use jobhost::producer::{EnqueueOptions, ProduceError, Producer};
use jobhost_sdk::{Job, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "shop")]
enum ShopQueues {
    #[queue(max_priority = 7)]
    Orders,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = ShopQueues::Orders, name = "shop.PlaceOrder")]
struct PlaceOrder {
    sku: String,
}

async fn producer() -> (MemoryBackend, Producer<ShopQueues, MemoryBackend>) {
    let backend = MemoryBackend::new();
    let producer = Producer::new(backend.clone())
        .await
        .expect("declares the queue set");
    (backend, producer)
}

#[tokio::test(start_paused = true)]
async fn enqueue_publishes_a_first_attempt_envelope_on_the_jobs_queue() {
    let (backend, producer) = producer().await;
    let id = producer
        .enqueue(&PlaceOrder { sku: "A-1".into() })
        .await
        .expect("enqueued");
    let pending = backend.pending("shop.orders");
    assert_eq!(pending.len(), 1);
    let envelope = &pending[0];
    assert_eq!(
        (
            envelope.job_id,
            envelope.job_type.as_str(),
            envelope.attempt
        ),
        (id, "shop.PlaceOrder", 1)
    );
    assert_eq!(envelope.payload.get(), r#"{"sku":"A-1"}"#);
}

#[tokio::test(start_paused = true)]
async fn enqueue_after_holds_the_job_for_the_rounded_delay_at_normal_priority() {
    let (backend, producer) = producer().await;
    producer
        .enqueue_after(
            &PlaceOrder { sku: "A-2".into() },
            Duration::from_millis(1500),
        )
        .await
        .expect("enqueued");
    let held = backend.deferred("shop.orders");
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].delay, held[0].envelope.priority),
        (Duration::from_secs(2), 0)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        backend.pending("shop.orders").len(),
        1,
        "released after the delay"
    );
}

#[tokio::test(start_paused = true)]
async fn defer_holds_the_job_and_returns_it_at_the_queues_top_priority() {
    let (backend, producer) = producer().await;
    producer
        .defer(&PlaceOrder { sku: "A-3".into() }, Duration::from_secs(3))
        .await
        .expect("deferred");
    let held = backend.deferred("shop.orders");
    assert_eq!(
        (held[0].delay, held[0].envelope.priority),
        (Duration::from_secs(3), 7)
    );
}

#[tokio::test(start_paused = true)]
async fn enqueue_with_an_expiry_writes_the_deadline_and_a_delayed_job_is_held_with_it() {
    let (backend, producer) = producer().await;
    let before = Deadline::from_now(Duration::from_secs(600));
    let options = EnqueueOptions::new()
        .delay(Duration::from_millis(1500))
        .expires_in(Duration::from_secs(600));
    producer
        .enqueue_with(&PlaceOrder { sku: "A-4".into() }, options)
        .await
        .expect("enqueued");
    let after = Deadline::from_now(Duration::from_secs(600));
    let held = backend.deferred("shop.orders");
    assert_eq!(held[0].delay, Duration::from_secs(2));
    let deadline = held[0].envelope.expires_at_ms.expect("a deadline");
    assert!(
        (before..=after).contains(&deadline),
        "ten minutes from the enqueue: {deadline}"
    );

    let forever = EnqueueOptions::new().expires_in(Duration::MAX);
    producer
        .enqueue_with(&PlaceOrder { sku: "A-5".into() }, forever)
        .await
        .expect("enqueued");
    assert_eq!(
        backend.pending("shop.orders")[0].expires_at_ms,
        Some(Deadline::from_epoch_ms(u64::MAX)),
        "a length past the end of time saturates to a deadline that never comes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_unique_enqueue_is_refused_with_the_holders_id_while_its_key_is_held() {
    let (backend, producer) = producer().await;
    let unique = || EnqueueOptions::new().unique("A-6", Duration::from_secs(600));
    let first = producer
        .enqueue_with(&PlaceOrder { sku: "A-6".into() }, unique())
        .await
        .expect("enqueued");
    let refused = producer
        .enqueue_with(&PlaceOrder { sku: "A-6".into() }, unique())
        .await
        .expect_err("a duplicate");
    assert!(
        matches!(
            refused,
            ProduceError::Broker(BrokerError::Duplicate { existing: Some(id), .. }) if id == first
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "a `shop.PlaceOrder` job with this unique key is already queued, held or running: job {first}"
        )
    );
    assert_eq!(
        backend.pending("shop.orders").len(),
        1,
        "nothing else was published"
    );
    tokio::time::advance(Duration::from_secs(600)).await;
    producer
        .enqueue_with(&PlaceOrder { sku: "A-6".into() }, unique())
        .await
        .expect("free once `for` ended");
}
