//! The queues `declare` and delayed publishes create, checked against the broker.

use std::time::Duration;

use jobhost::broker::{Backend, BrokerError};
use jobhost::envelope::Envelope;
use jobhost_sdk::QueueConfig;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::value::RawValue;

use crate::support::{
    Cleanup, PATIENCE, backend, hold, queue_arguments, raw_channel, unique, within,
};

fn payload() -> Box<RawValue> {
    RawValue::from_string(r#"{"n":1}"#.to_owned()).expect("valid json")
}

#[tokio::test]
async fn declare_creates_the_work_queue_with_its_arguments_and_an_argument_free_dead_letter_queue()
{
    let Some(backend) = backend(&unique("topology")).await else {
        return;
    };
    let name = unique("declared");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig {
        max_priority: 5,
        message_ttl: Some(Duration::from_secs(60)),
        ..QueueConfig::new(&name)
    };

    within(PATIENCE, "declare", backend.declare(&config))
        .await
        .expect("declared");
    within(PATIENCE, "a repeated declare", backend.declare(&config))
        .await
        .expect("declare is idempotent");

    let arguments = queue_arguments(&name);
    assert!(
        arguments.contains(r#""x-max-priority",5"#),
        "work queue arguments: {arguments}"
    );
    assert!(
        arguments.contains(r#""x-message-ttl",60000"#),
        "work queue arguments: {arguments}"
    );
    assert_eq!(
        queue_arguments(&format!("{name}.dead")),
        "[]",
        "the dead-letter queue has no arguments"
    );
}

#[tokio::test]
async fn declaring_an_existing_queue_with_other_arguments_is_refused_and_the_backend_keeps_working()
{
    let Some(backend) = backend(&unique("topology")).await else {
        return;
    };
    let name = unique("conflict");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig::new(&name);
    backend.declare(&config).await.expect("declared");

    let conflicting = QueueConfig {
        max_priority: 3,
        ..config.clone()
    };
    let error = within(
        PATIENCE,
        "a conflicting declare",
        backend.declare(&conflicting),
    )
    .await
    .expect_err("a queue cannot change its arguments");
    assert!(
        matches!(error, BrokerError::Refused { ref queue, .. } if queue == &name),
        "{error}"
    );

    let envelope = Envelope::new("t", &name, payload());
    within(
        PATIENCE,
        "a publish after the refusal",
        backend.publish(&envelope, None),
    )
    .await
    .expect("a refused declaration leaves publishing intact");
}

#[tokio::test]
async fn a_queue_name_without_room_for_hold_queue_names_is_refused_before_reaching_the_broker() {
    let Some(backend) = backend(&unique("topology")).await else {
        return;
    };
    let error = backend
        .declare(&QueueConfig::new("q".repeat(240)))
        .await
        .expect_err("too long");
    assert!(
        matches!(error, BrokerError::InvalidQueueName { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_delayed_publish_declares_its_hold_queue_with_ttl_dead_lettering_and_expiry() {
    let Some(backend) = backend(&unique("topology")).await else {
        return;
    };
    let name = unique("held");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");

    let envelope = Envelope::new("t", &name, payload());
    within(
        PATIENCE,
        "a delayed publish",
        backend.publish(&envelope, Some(hold(Duration::from_secs(20)))),
    )
    .await
    .expect("published into the hold queue");

    // RabbitMQ compares these four arguments on every declaration, so a declaration
    // with exactly them succeeds and one with another TTL fails.
    let hold = format!("{name}.deferred.20000");
    let channel = raw_channel().await;
    let mut expected = FieldTable::default();
    expected.insert("x-message-ttl".into(), AMQPValue::LongLongInt(20_000));
    expected.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    expected.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(name.as_str())),
    );
    expected.insert("x-expires".into(), AMQPValue::LongLongInt(40_000));
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(hold.as_str().into(), durable, expected.clone())
        .await;
    assert_eq!(
        declared
            .expect("the hold queue has exactly these arguments")
            .message_count(),
        1
    );

    let mut other_ttl = expected;
    other_ttl.insert("x-message-ttl".into(), AMQPValue::LongLongInt(1_000));
    let conflicting = channel
        .queue_declare(hold.as_str().into(), durable, other_ttl)
        .await;
    assert!(
        conflicting.is_err(),
        "a declaration with another TTL must conflict"
    );
    let _ = raw_channel()
        .await
        .queue_delete(hold.as_str().into(), Default::default())
        .await;
}

#[tokio::test]
async fn a_delayed_publish_to_a_queue_never_declared_here_is_refused() {
    let Some(backend) = backend(&unique("topology")).await else {
        return;
    };
    let envelope = Envelope::new("t", unique("undeclared"), payload());
    let error = backend
        .publish(&envelope, Some(hold(Duration::from_secs(1))))
        .await
        .expect_err("unknown");
    assert!(matches!(error, BrokerError::UnknownQueue(_)), "{error}");
}
