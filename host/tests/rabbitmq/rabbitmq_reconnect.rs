//! Losing the connection while publishing and consuming loses nothing, and the
//! reconnection is counted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::{Backend, Consumer, Delivery, RabbitMqOptions};
use jobhost::envelope::Envelope;
use jobhost::metrics::Metrics;
use jobhost::telemetry::Telemetry;
use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::support::{
    Cleanup, PATIENCE, backend_with, close_connections_named, connections_named, unique, within,
};

/// Published at a steady pace until the connection is closed, so some publishes are
/// in flight when it drops.
const PACE: Duration = Duration::from_millis(5);

/// Published at once right after the connection was closed, into the outage.
const AFTER_THE_CLOSE: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_by_the_broker_loses_no_job_and_the_backend_recovers_by_itself() {
    let connection_name = unique("reconnect");
    let metrics = Metrics::new();
    let options = RabbitMqOptions::default()
        .connection_name(&connection_name)
        .telemetry(Telemetry::builder().attach(metrics.clone()).build());
    let Some(backend) = backend_with(options).await else {
        return;
    };
    let backend = Arc::new(backend);
    let name = unique("reconnect");
    let _cleanup = Cleanup::new(&[&name]);
    let config = QueueConfig {
        prefetch: 20,
        ..QueueConfig::new(&name)
    };
    backend.declare(&config).await.expect("declared");
    let mut consumer = backend.consume(&config).await.expect("subscribed");

    let (acked_tx, mut acked) = mpsc::unbounded_channel();
    let consuming = tokio::spawn(async move {
        while let Some(delivery) = consumer.next().await {
            let job_id = Envelope::decode(delivery.body())
                .expect("an envelope")
                .job_id;
            // A delivery of the dropped channel fails to ack and comes back later.
            if delivery.ack().await.is_ok() {
                let _ = acked_tx.send(job_id);
            }
        }
    });

    let (closed_tx, closed) = watch::channel(false);
    let publishing = tokio::spawn(publish_until_closed(
        Arc::clone(&backend),
        name.clone(),
        closed,
    ));

    let closed_name = connection_name.clone();
    let closed_pids = tokio::task::spawn_blocking(move || close_connections_named(&closed_name))
        .await
        .expect("rabbitmqctl closed the connection");
    closed_tx.send_replace(true);

    let outage = Duration::from_secs(60);
    let published: HashSet<_> = within(outage, "every publish", publishing)
        .await
        .expect("the publisher task")
        .into_iter()
        .map(|result| result.expect("a publish caught by the outage waits and is confirmed"))
        .collect();

    let mut seen = HashSet::new();
    within(outage, "every published job to be acked", async {
        while !published.is_subset(&seen) {
            seen.insert(acked.recv().await.expect("the consumer keeps running"));
        }
    })
    .await;

    let now = tokio::task::spawn_blocking(move || connections_named(&connection_name))
        .await
        .expect("rabbitmqctl lists connections");
    assert!(
        !now.is_empty() && now.iter().all(|pid| !closed_pids.contains(pid)),
        "the backend reconnected by itself: closed {closed_pids:?}, now {now:?}"
    );
    let scrape = metrics.encode();
    assert!(
        scrape
            .lines()
            .any(|line| line == "jobhost_broker_reconnects_total 1"),
        "the one reconnection is counted:\n{scrape}"
    );

    backend.close().await;
    within(
        PATIENCE,
        "the consumer to end once the backend is closed",
        consuming,
    )
    .await
    .expect("the consumer task ends cleanly");
}

/// Publish paced jobs until `closed`, then [`AFTER_THE_CLOSE`] more at once; every
/// publish runs in its own task so an outage does not hold up the next one.
async fn publish_until_closed(
    backend: Arc<impl Backend>,
    queue: String,
    mut closed: watch::Receiver<bool>,
) -> Vec<Result<uuid::Uuid, jobhost::broker::BrokerError>> {
    let mut publishes = JoinSet::new();
    let mut publish = |n: usize| {
        let payload = RawValue::from_string(n.to_string()).expect("valid json");
        let job = Envelope::new("tests::Job", &queue, payload);
        let backend = Arc::clone(&backend);
        publishes.spawn(async move { backend.publish(&job, None).await.map(|()| job.job_id) });
    };
    let mut pace = tokio::time::interval(PACE);
    let mut n = 0;
    while !*closed.borrow_and_update() {
        tokio::select! {
            _ = pace.tick() => publish(n),
            _ = closed.changed() => {}
        }
        n += 1;
    }
    for n in n..n + AFTER_THE_CLOSE {
        publish(n);
    }
    publishes.join_all().await
}
