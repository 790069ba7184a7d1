//! Publishing, consuming and settling through RabbitMQ: what lands where, with which
//! properties, in which order, and when.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobhost::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery};
use jobhost::envelope::Envelope;
use jobhost_sdk::QueueConfig;
use lapin::types::{AMQPValue, ShortString};
use serde_json::value::RawValue;
use tokio::task::JoinSet;

use crate::support::{Cleanup, PATIENCE, backend, hold, raw_channel, ready, take, unique, within};

fn envelope(queue: &str, payload: &str) -> Envelope {
    Envelope::new(
        "tests::Job",
        queue,
        RawValue::from_string(payload.to_owned()).expect("valid json"),
    )
}

fn header<'a>(delivery: &'a lapin::message::Delivery, key: &str) -> Option<&'a AMQPValue> {
    delivery.properties.headers().as_ref()?.inner().get(key)
}

#[tokio::test]
async fn a_published_job_is_consumed_acked_and_gone_with_the_envelope_properties_on_the_wire() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let name = unique("round-trip");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig::new(&name);
    backend.declare(&config).await.expect("declared");

    let inspected = envelope(&name, r#"{"to":"a@b.c"}"#).deferred(4);
    within(PATIENCE, "publish", backend.publish(&inspected, None))
        .await
        .expect("confirmed");
    let channel = raw_channel().await;
    let raw = take(&channel, &name)
        .await
        .expect("the message is on the work queue");
    let properties = &raw.properties;
    assert_eq!(
        raw.data,
        inspected.encode(),
        "the body is the encoded envelope"
    );
    assert_eq!(
        properties.content_type().as_ref().map(ShortString::as_str),
        Some("application/json")
    );
    assert_eq!(*properties.delivery_mode(), Some(2), "jobs are persistent");
    assert_eq!(
        properties.message_id().as_ref().map(ShortString::to_string),
        Some(inspected.job_id.to_string())
    );
    assert_eq!(
        properties.kind().as_ref().map(ShortString::as_str),
        Some("tests::Job")
    );
    assert_eq!(*properties.priority(), Some(4));
    assert_eq!(header(&raw, "x-attempt"), Some(&AMQPValue::LongUInt(1)));
    assert_eq!(header(&raw, "x-deferrals"), Some(&AMQPValue::LongUInt(1)));

    let consumed = envelope(&name, r#"{"n":2}"#);
    backend.publish(&consumed, None).await.expect("confirmed");
    let mut consumer = within(PATIENCE, "subscribe", backend.consume(&config))
        .await
        .expect("subscribed");
    let delivery = within(PATIENCE, "a delivery", consumer.next())
        .await
        .expect("a delivery");
    assert!(
        !delivery.redelivered(),
        "a first delivery is not a redelivery"
    );
    assert_eq!(
        Envelope::decode(delivery.body()).expect("an envelope"),
        consumed
    );
    within(PATIENCE, "ack", delivery.ack())
        .await
        .expect("acked");
    consumer.close().await;
    assert_eq!(ready(&channel, &name).await, 0, "an acked job is gone");
}

#[tokio::test]
async fn a_requeued_delivery_comes_back_marked_as_redelivered() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let name = unique("requeue");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig::new(&name);
    backend.declare(&config).await.expect("declared");
    let job = envelope(&name, "{}");
    backend.publish(&job, None).await.expect("confirmed");

    let mut consumer = backend.consume(&config).await.expect("subscribed");
    let first = within(PATIENCE, "the first delivery", consumer.next())
        .await
        .expect("delivered");
    within(PATIENCE, "requeue", first.requeue())
        .await
        .expect("requeued");
    let again = within(PATIENCE, "the redelivery", consumer.next())
        .await
        .expect("redelivered");
    assert!(
        again.redelivered(),
        "the broker marks a requeued message as redelivered"
    );
    assert_eq!(
        Envelope::decode(again.body()).expect("an envelope").job_id,
        job.job_id
    );
    again.ack().await.expect("acked");
}

#[tokio::test]
async fn a_max_priority_job_overtakes_the_priority_zero_backlog() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let name = unique("priority");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig {
        prefetch: 1,
        ..QueueConfig::new(&name)
    };
    backend.declare(&config).await.expect("declared");
    for n in 0..5 {
        backend
            .publish(&envelope(&name, &n.to_string()), None)
            .await
            .expect("confirmed");
    }
    let urgent = envelope(&name, "\"urgent\"").deferred(config.max_priority);
    backend.publish(&urgent, None).await.expect("confirmed");

    let mut consumer = backend.consume(&config).await.expect("subscribed");
    let first = within(PATIENCE, "the first delivery", consumer.next())
        .await
        .expect("delivered");
    assert_eq!(
        Envelope::decode(first.body()).expect("an envelope").job_id,
        urgent.job_id,
        "the max-priority job is delivered before the backlog published ahead of it"
    );
    first.ack().await.expect("acked");
}

#[tokio::test]
async fn a_delayed_job_waits_in_its_hold_queue_and_then_arrives_on_the_work_queue() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let name = unique("delayed");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig::new(&name);
    backend.declare(&config).await.expect("declared");
    let delay = Duration::from_millis(400);
    let job = envelope(&name, "{}").next_attempt();

    let published = Instant::now();
    within(
        PATIENCE,
        "a delayed publish",
        backend.publish(&job, Some(hold(delay))),
    )
    .await
    .expect("confirmed");
    let channel = raw_channel().await;
    assert_eq!(
        ready(&channel, &format!("{name}.deferred.400")).await,
        1,
        "the job waits in the hold queue"
    );
    assert_eq!(
        ready(&channel, &name).await,
        0,
        "nothing is on the work queue while the job waits"
    );

    let mut consumer = backend.consume(&config).await.expect("subscribed");
    let delivery = within(PATIENCE, "the delayed job", consumer.next())
        .await
        .expect("delivered");
    assert!(
        published.elapsed() >= delay,
        "released after {:?}, before its delay",
        published.elapsed()
    );
    assert_eq!(Envelope::decode(delivery.body()).expect("an envelope"), job);
    delivery.ack().await.expect("acked");
}

#[tokio::test]
async fn a_dead_letter_lands_in_the_dead_letter_queue_with_its_raw_body_and_why() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let name = unique("dead");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");
    let body = b"not json \xff at all";

    let letter = DeadLetterOut {
        queue: &name,
        body,
        reason: "malformed envelope",
        attempts: 0,
        trace: None,
    };
    within(PATIENCE, "dead-lettering", backend.dead_letter(letter))
        .await
        .expect("confirmed");
    let raw = take(&raw_channel().await, &format!("{name}.dead"))
        .await
        .expect("in the dead-letter queue");
    assert_eq!(raw.data, body, "the body is kept byte for byte");
    assert_eq!(
        header(&raw, "x-death-reason"),
        Some(&AMQPValue::LongString("malformed envelope".into()))
    );
    assert_eq!(
        header(&raw, "x-original-queue"),
        Some(&AMQPValue::LongString(name.as_str().into()))
    );
    assert_eq!(header(&raw, "x-attempts"), Some(&AMQPValue::LongUInt(0)));
    assert_eq!(
        *raw.properties.delivery_mode(),
        Some(2),
        "dead letters are persistent"
    );
}

#[tokio::test]
async fn a_publish_to_a_queue_that_does_not_exist_is_returned_and_reported_as_unroutable() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let job = envelope(&unique("nowhere"), "{}");
    let error = within(
        PATIENCE,
        "an unroutable publish",
        backend.publish(&job, None),
    )
    .await
    .expect_err("an unroutable mandatory publish is an error");
    assert!(
        matches!(error, BrokerError::Unroutable { ref queue, .. } if queue == &job.queue),
        "{error}"
    );
    assert!(
        error.to_string().contains("NO_ROUTE"),
        "the broker's reason is kept: {error}"
    );
}

#[tokio::test]
async fn concurrent_publishes_are_all_confirmed_and_on_the_queue() {
    let Some(backend) = backend(&unique("messages")).await else {
        return;
    };
    let backend = Arc::new(backend);
    let name = unique("pipelined");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");

    let mut publishes = JoinSet::new();
    for n in 0..500 {
        let (backend, job) = (Arc::clone(&backend), envelope(&name, &n.to_string()));
        publishes.spawn(async move { backend.publish(&job, None).await });
    }
    let confirmed = within(PATIENCE, "500 concurrent publishes", publishes.join_all()).await;
    assert!(
        confirmed.iter().all(Result::is_ok),
        "every publish is confirmed: {confirmed:?}"
    );
    assert_eq!(
        ready(&raw_channel().await, &name).await,
        500,
        "every confirmed publish is on the queue"
    );
}
