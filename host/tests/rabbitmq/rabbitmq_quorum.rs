//! Quorum queues on the broker: the topology a quorum queue declares, retries through its
//! hold queues, what becomes of priorities, and a queue that exists as the other type.
//! A single node runs quorum queues too (a cluster of one), so these run on the test
//! broker; `cluster_faults.rs` runs them on three nodes.

use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::{Backend, BrokerError, RabbitMqBackend};
use jobhost::envelope::Envelope;
use jobhost::plugin::{Engine, EngineConfig};
use jobhost::reload::{Loader, ReloadError};
use jobhost::worker::Plugins;
use jobhost_sdk::{QueueConfig, QueueType};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::value::RawValue;

use crate::support;
use crate::support::{
    Cleanup, PATIENCE, backend, hold, rabbitmqctl, raw_channel, ready, take, unique, within,
};

fn payload() -> Box<RawValue> {
    RawValue::from_string(r#"{"n":1}"#.to_owned()).expect("valid json")
}

fn quorum(name: &str) -> QueueConfig {
    QueueConfig {
        queue_type: QueueType::Quorum,
        ..QueueConfig::new(name)
    }
}

/// `rabbitmqctl list_queues name type arguments` for the queue named exactly `queue`.
fn type_and_arguments(queue: &str) -> String {
    support::queue_columns(queue, &["type", "arguments"])
}

/// Wait until `queue` holds `count` ready messages.
async fn wait_ready(queue: &str, count: u32) {
    let channel = raw_channel().await;
    within(
        PATIENCE,
        &format!("{count} message(s) on `{queue}`"),
        async {
            while ready(&channel, queue).await < count {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_quorum_queue_declares_quorum_work_dead_letter_and_hold_queues() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let name = unique("quorum");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig {
        message_ttl: Some(Duration::from_secs(60)),
        ..quorum(&name)
    };
    within(PATIENCE, "declare", backend.declare(&config))
        .await
        .expect("a quorum queue is declared");
    within(PATIENCE, "a repeated declare", backend.declare(&config))
        .await
        .expect("declare is idempotent");

    let work = type_and_arguments(&name);
    assert!(work.starts_with("quorum\t"), "work queue: {work}");
    assert!(
        !work.contains("x-max-priority"),
        "a quorum queue has no priority argument: {work}"
    );
    assert!(
        work.contains(r#""x-message-ttl",60000"#),
        "work queue: {work}"
    );
    let dead = type_and_arguments(&format!("{name}.dead"));
    assert!(dead.starts_with("quorum\t"), "dead-letter queue: {dead}");

    let envelope = Envelope::new("t", &name, payload());
    within(
        PATIENCE,
        "a delayed publish",
        publish_as_the_worker_would(&backend, &envelope, Duration::from_secs(20)),
    )
    .await;
    let hold_queue = format!("{name}.deferred.20000");
    let held = type_and_arguments(&hold_queue);
    let _ = raw_channel()
        .await
        .queue_delete(hold_queue.as_str().into(), Default::default())
        .await;
    assert!(held.starts_with("quorum\t"), "hold queue: {held}");
    for argument in [
        r#""x-dead-letter-strategy","at-least-once""#,
        r#""x-overflow","reject-publish""#,
        r#""x-message-ttl",20000"#,
        // Two delays plus ten minutes of grace, so that messages still waiting for the
        // work queue's confirm are never expired along with their hold queue.
        r#""x-expires",640000"#,
    ] {
        assert!(
            held.contains(argument),
            "hold queue lacks {argument}: {held}"
        );
    }
}

#[tokio::test]
async fn a_retry_through_a_quorum_hold_queue_comes_back_to_its_work_queue() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let name = unique("quorum-retry");
    let _cleanup = Cleanup::new(&[&name]);
    backend.declare(&quorum(&name)).await.expect("declared");

    let envelope = Envelope::new("t", &name, payload());
    within(
        PATIENCE,
        "a delayed publish",
        publish_as_the_worker_would(&backend, &envelope, Duration::from_millis(300)),
    )
    .await;
    wait_ready(&name, 1).await;

    let channel = raw_channel().await;
    let back = take(&channel, &name).await.expect("the retry is back");
    let decoded = Envelope::decode(&back.data).expect("an envelope");
    assert_eq!(decoded.job_id, envelope.job_id, "the same job came back");
}

/// RabbitMQ 4 gives quorum queues two priority levels (above 4 is high); RabbitMQ 3 none.
/// A deferral is published at the queue's max priority (10 by default) either way.
#[tokio::test]
async fn on_a_quorum_queue_a_deferral_goes_first_only_where_the_broker_has_two_priority_levels() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let name = unique("quorum-priority");
    let _cleanup = Cleanup::new(&[&name]);
    backend.declare(&quorum(&name)).await.expect("declared");

    let waiting = Envelope::new("t", &name, payload());
    backend.publish(&waiting, None).await.expect("published");
    let deferred = Envelope::new("t", &name, payload()).deferred(10);
    backend.publish(&deferred, None).await.expect("published");

    let channel = raw_channel().await;
    let first = take(&channel, &name).await.expect("a message");
    let first = Envelope::decode(&first.data).expect("an envelope").job_id;
    let version = rabbitmqctl(&["version"]);
    if version.trim_start().starts_with('3') {
        assert_eq!(
            first, waiting.job_id,
            "RabbitMQ {version}: quorum queues are first in, first out, priority or not"
        );
    } else {
        assert_eq!(
            first, deferred.job_id,
            "RabbitMQ {version}: priority 10 is a quorum queue's high level"
        );
    }
}

async fn declare_raw(name: &str, arguments: FieldTable) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    raw_channel()
        .await
        .queue_declare(name.into(), durable, arguments)
        .await
        .expect("declared behind the host's back");
}

#[tokio::test]
async fn declaring_a_classic_queue_as_quorum_is_refused_with_a_message_that_says_what_to_do() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let name = unique("was-classic");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared as classic");

    let error = within(
        PATIENCE,
        "a quorum declare",
        backend.declare(&quorum(&name)),
    )
    .await
    .expect_err("a queue cannot change its type");
    assert!(
        matches!(
            error,
            BrokerError::QueueTypeConflict { ref queue, wanted: QueueType::Quorum, .. } if queue == &name
        ),
        "{error}"
    );
    let message = error.to_string();
    for advice in [
        "keep the queue's type in the plugin (`queue_type = \"classic\"`)",
        &format!("drain `{name}` and its dead letters and delete both"),
    ] {
        assert!(message.contains(advice), "`{message}` should say {advice}");
    }
    assert!(error.is_permanent(), "retrying the declaration cannot help");
}

#[tokio::test]
async fn declaring_a_quorum_queue_as_classic_is_refused_with_a_message_that_says_what_to_do() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let name = unique("was-quorum");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&quorum(&name))
        .await
        .expect("declared as quorum");

    let error = within(
        PATIENCE,
        "a classic declare",
        backend.declare(&QueueConfig::new(&name)),
    )
    .await
    .expect_err("a queue cannot change its type");
    assert!(
        error
            .to_string()
            .contains("keep the queue's type in the plugin (`queue_type = \"quorum\"`)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_plugin_whose_quorum_queue_exists_as_classic_is_refused_at_load_and_says_what_to_do() {
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    // The `ledger-quorum` fixture declares the quorum queues `test.qledger.work` and
    // `test.qledger.done`; the first exists as a classic queue here.
    let work = "test.qledger.work";
    let _cleanup = Cleanup::new(&[work, "test.qledger.done"]);
    declare_raw(work, FieldTable::default()).await;

    let backend = Arc::new(backend);
    let engine = Engine::new(EngineConfig::default()).expect("the engine starts");
    let declaring = backend.clone();
    let loader = Loader::new(engine, Plugins::new()).declaring(Arc::new(move |queue| {
        let backend: Arc<RabbitMqBackend> = declaring.clone();
        Box::pin(async move { backend.declare(&queue).await })
    }));
    let dir = tempfile::tempdir().expect("a plugin directory");
    let file = dir.path().join("ledger_quorum.wasm");
    std::fs::copy(jobhost_fixtures::wasm("ledger-quorum"), &file).expect("the fixture copies");

    let error = within(Duration::from_secs(120), "the load", loader.sync(&file))
        .await
        .expect_err("the plugin is refused");
    assert!(
        matches!(error, ReloadError::Broker { .. }),
        "refused by the broker: {error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("ledger_quorum.wasm"),
        "names the file: {message}"
    );
    assert!(
        message.contains("`queue_type = \"classic\"`")
            && message.contains("drain `test.qledger.work`"),
        "says what to do: {message}"
    );
    assert_eq!(
        loader.plugins().current().units().count(),
        0,
        "nothing of the refused plugin serves"
    );
}

/// Publish `envelope` into its hold queue for `delay`, as a worker's retry does: a nack
/// is not final for a worker (`BrokerError::is_permanent`), whose delivery is redelivered
/// and retried again, so it is not final here either, up to a few times. RabbitMQ 3.10
/// nacks the first publish of a channel into a quorum queue with `reject-publish` when
/// registering the channel as an enqueuer times out or finds no leader yet, which a
/// freshly declared queue on a loaded machine can do (seen once in CI).
async fn publish_as_the_worker_would(
    backend: &RabbitMqBackend,
    envelope: &Envelope,
    delay: Duration,
) {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        match backend.publish(envelope, Some(hold(delay))).await {
            Ok(()) => return,
            Err(error @ BrokerError::NotConfirmed { .. }) if attempt < ATTEMPTS => {
                eprintln!("attempt {attempt} was nacked, publishing again: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("published into the hold queue: {error}"),
        }
    }
}

/// A quorum hold queue dead-letters at-least-once: a worker of the broker moves expired
/// messages one confirmed batch at a time, so a burst of retries leaves the hold queue
/// later than its TTL says, and the queue must not expire (taking them along) meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_retries_through_a_quorum_hold_queue_all_come_back() {
    const RETRIES: u32 = 3000;
    let Some(backend) = backend(&unique("quorum")).await else {
        return;
    };
    let backend = Arc::new(backend);
    let name = unique("quorum-burst");
    let _cleanup = Cleanup::new(&[&name]);
    backend.declare(&quorum(&name)).await.expect("declared");

    let mut publishing = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (backend, name) = (backend.clone(), name.clone());
        publishing.spawn(async move {
            for _ in 0..RETRIES / 8 {
                let envelope = Envelope::new("t", &name, payload());
                publish_as_the_worker_would(&backend, &envelope, Duration::from_secs(1)).await;
            }
        });
    }
    within(
        Duration::from_secs(120),
        "the retries to be held",
        publishing.join_all(),
    )
    .await;

    let channel = raw_channel().await;
    within(
        Duration::from_secs(120),
        "every retry back on its work queue",
        async {
            while ready(&channel, &name).await < RETRIES {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
}
