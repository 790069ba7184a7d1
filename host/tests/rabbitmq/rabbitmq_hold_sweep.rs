//! The hold-queue sweeper on the broker: a message a hold queue kept past its delay is
//! released onto the work queue by the host, and one still waiting is left to the broker.
//!
//! RabbitMQ 3.10 keeps messages past their TTL in a quorum queue whose leader moved
//! (`cluster_faults.rs` meets it on three nodes). A single node does not do that on
//! demand, so these tests lay out a queue the way such a broker leaves it: a plain AMQP
//! client puts a message into the hold queue that went in, by its `timestamp`, an hour
//! ago.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jobhost::broker::{Backend, Consumer, Delivery, RabbitMqBackend, RabbitMqOptions};
use jobhost::envelope::Envelope;
use jobhost::metrics::Metrics;
use jobhost::telemetry::Telemetry;
use jobhost_sdk::{QueueConfig, QueueType};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel};
use serde_json::value::RawValue;

use crate::support::{
    Cleanup, PATIENCE, backend_with, hold, raw_channel, ready, take, unique, within,
};

/// Much shorter than the default, so a test sees many sweeps.
const SWEEP: Duration = Duration::from_millis(50);

/// The sweeper's grace beyond a hold queue's delay (`broker::rabbitmq::sweep`).
const GRACE: Duration = Duration::from_secs(5);

fn job(queue: &str, n: u32) -> Envelope {
    let payload = RawValue::from_string(format!(r#"{{"n":{n}}}"#)).expect("valid json");
    Envelope::new("tests::Job", queue, payload).next_attempt()
}

fn config(name: &str, queue_type: QueueType) -> QueueConfig {
    QueueConfig {
        queue_type,
        ..QueueConfig::new(name)
    }
}

/// A backend that sweeps every [`SWEEP`] and counts into `metrics`, with a new work queue
/// declared; the work queue and its hold queue for `hold_ms` go when `_cleanup` drops.
struct Declared {
    metrics: Metrics,
    backend: RabbitMqBackend,
    name: String,
    config: QueueConfig,
    _cleanup: Cleanup,
}

async fn declared(queue_type: QueueType, hold_ms: u64) -> Option<Declared> {
    let metrics = Metrics::default();
    let options = RabbitMqOptions::default()
        .connection_name(unique("sweep"))
        .hold_sweep_interval(SWEEP)
        .telemetry(Telemetry::builder().attach(metrics.clone()).build());
    let backend = backend_with(options).await?;
    let name = unique("sweep");
    let cleanup = Cleanup::new(&[&name, &format!("{name}.deferred.{hold_ms}")]);
    let config = config(&name, queue_type);
    backend.declare(&config).await.expect("declared");
    Some(Declared {
        metrics,
        backend,
        name,
        config,
        _cleanup: cleanup,
    })
}

/// Put `job` into `hold` as a plain client would, stamped `age` ago.
async fn hold_plainly(channel: &Channel, hold: &str, job: &Envelope, age: Duration) {
    let stamped = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .saturating_sub(age);
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_timestamp(stamped.as_secs());
    channel
        .basic_publish(
            "".into(),
            hold.into(),
            BasicPublishOptions::default(),
            &job.encode(),
            properties,
        )
        .await
        .expect("basic.publish")
        .await
        .expect("the broker takes the message");
}

async fn a_message_kept_past_its_delay_is_released_and_a_younger_one_is_not(queue_type: QueueType) {
    let Some(setup) = declared(queue_type, 60_000).await else {
        return;
    };
    let Declared {
        metrics,
        backend,
        name,
        config,
        ..
    } = &setup;
    let hold_queue = format!("{name}.deferred.60000");
    // The host's own delayed publish declares the hold queue and makes it one the host
    // looks after; the test then takes its message out, to lay the queue out itself.
    let delay = hold(Duration::from_secs(60));
    within(
        PATIENCE,
        "a delayed publish",
        backend.publish(&job(name, 0), Some(delay)),
    )
    .await
    .expect("confirmed");
    let channel = raw_channel().await;
    // A sweep may hold the job for a moment, to look at it.
    within(PATIENCE, "the host's job out of its hold queue", async {
        while take(&channel, &hold_queue).await.is_none() {
            tokio::time::sleep(SWEEP / 5).await;
        }
    })
    .await;

    let overdue = job(name, 1);
    let young = job(name, 2);
    hold_plainly(&channel, &hold_queue, &overdue, Duration::from_secs(3600)).await;
    hold_plainly(&channel, &hold_queue, &young, Duration::ZERO).await;

    let mut consumer = backend.consume(config).await.expect("subscribed");
    let released = within(PATIENCE, "the overdue job", consumer.next())
        .await
        .expect("delivered");
    assert_eq!(
        Envelope::decode(released.body()).expect("an envelope"),
        overdue,
        "the job held an hour in a 60 s hold queue comes out"
    );
    released.ack().await.expect("acked");

    // Many sweeps pass in this window; each looks at the young job and hands it back.
    let more = tokio::time::timeout(20 * SWEEP, consumer.next()).await;
    assert!(
        more.is_err(),
        "a job held for less than its delay stays held: {:?}",
        more.map(|delivery| delivery.map(|d| String::from_utf8_lossy(d.body()).into_owned()))
    );
    within(PATIENCE, "the young job back in its hold queue", async {
        while ready(&channel, &hold_queue).await != 1 {
            tokio::time::sleep(SWEEP).await;
        }
    })
    .await;
    let counted = metrics.encode();
    assert!(
        counted.contains(&format!(
            "jobhost_hold_overdue_released_total{{queue=\"{name}\"}} 1"
        )),
        "the release is counted:\n{counted}"
    );
}

#[tokio::test]
async fn a_classic_hold_queue_releases_through_the_host_what_it_kept_past_its_delay() {
    a_message_kept_past_its_delay_is_released_and_a_younger_one_is_not(QueueType::Classic).await;
}

#[tokio::test]
async fn a_quorum_hold_queue_releases_through_the_host_what_it_kept_past_its_delay() {
    a_message_kept_past_its_delay_is_released_and_a_younger_one_is_not(QueueType::Quorum).await;
}

async fn a_job_the_sweeper_looked_at_comes_back_after_its_delay(queue_type: QueueType) {
    let Some(setup) = declared(queue_type, 1500).await else {
        return;
    };
    let Declared {
        metrics,
        backend,
        name,
        config,
        ..
    } = &setup;
    let delay = Duration::from_millis(1500);
    let held = job(name, 1);

    let published = Instant::now();
    within(
        PATIENCE,
        "a delayed publish",
        backend.publish(&held, Some(hold(delay))),
    )
    .await
    .expect("confirmed");
    let mut consumer = backend.consume(config).await.expect("subscribed");
    let delivery = within(PATIENCE, "the delayed job", consumer.next())
        .await
        .expect("delivered");
    let waited = published.elapsed();
    assert_eq!(
        Envelope::decode(delivery.body()).expect("an envelope"),
        held
    );
    delivery.ack().await.expect("acked");
    assert!(
        waited >= delay,
        "released after {waited:?}, before its delay"
    );
    // Released by the broker's expiry, not by the sweeper, which waits for the grace:
    // handing a message back leaves its expiry as it was.
    assert!(
        waited < delay + GRACE,
        "released after {waited:?}: the broker's expiry did not survive the sweeper's looks"
    );
    assert!(
        !metrics
            .encode()
            .contains("jobhost_hold_overdue_released_total{"),
        "nothing was released by the host"
    );
}

#[tokio::test]
async fn a_classic_hold_queue_still_releases_a_job_on_time_after_the_sweeper_looked_at_it() {
    a_job_the_sweeper_looked_at_comes_back_after_its_delay(QueueType::Classic).await;
}

#[tokio::test]
async fn a_quorum_hold_queue_still_releases_a_job_on_time_after_the_sweeper_looked_at_it() {
    a_job_the_sweeper_looked_at_comes_back_after_its_delay(QueueType::Quorum).await;
}
