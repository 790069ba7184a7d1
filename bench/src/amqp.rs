//! Raw lapin: the broker's limit, queue depths and cleanup, around jobhost's backend.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_core::Stream;
use jobhost::broker::{
    Backend, HoldQueue, RabbitMqBackend, RabbitMqOptions, dead_letter_queue_name,
};
use jobhost::envelope::Envelope;
use jobhost::plugin::Plugin;
use jobhost::policy::Granularity;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use tokio::task::JoinSet;

use jobhost::worker::{Plugins, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::cpu::{Spent, Stopwatch};
use crate::events::Events;
use crate::memory::invoke_noop;
use crate::metered::{Meter, Metered};
use crate::report::Samples;

/// Publishes in flight at once while filling a queue.
const PUBLISHES_IN_FLIGHT: usize = 512;

/// This run's queue name for `what`: `bench-<run id>.<what>`.
pub(crate) fn queue_name(what: &str) -> String {
    static RUN: OnceLock<String> = OnceLock::new();
    let run = RUN.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..8].to_owned());
    format!("bench-{run}.{what}")
}

/// A raw connection to the broker.
pub(crate) async fn connect(url: &str) -> anyhow::Result<Connection> {
    let properties = ConnectionProperties::default().with_connection_name("jobhost-bench".into());
    Ok(Connection::connect(url, properties).await?)
}

/// jobhost's backend at `url`, shareable.
pub(crate) async fn jobhost_backend(url: &str) -> anyhow::Result<Arc<RabbitMqBackend>> {
    let options = RabbitMqOptions::default().connection_name("jobhost-bench");
    Ok(Arc::new(RabbitMqBackend::connect(url, options).await?))
}

/// Publish every envelope through jobhost's backend (persistent, confirmed, pipelined).
pub(crate) async fn fill(
    backend: &Arc<RabbitMqBackend>,
    envelopes: impl IntoIterator<Item = Envelope>,
) -> anyhow::Result<()> {
    let mut publishing = JoinSet::new();
    for envelope in envelopes {
        if publishing.len() >= PUBLISHES_IN_FLIGHT
            && let Some(done) = publishing.join_next().await
        {
            done??;
        }
        let backend = Arc::clone(backend);
        publishing.spawn(async move { backend.publish(&envelope, None).await });
    }
    while let Some(done) = publishing.join_next().await {
        done??;
    }
    Ok(())
}

/// A worker draining pre-filled queues through a [`Metered`] backend.
pub(crate) struct DrainingWorker {
    pub(crate) meter: Arc<Meter>,
    /// Started with the worker, after the queues were filled.
    pub(crate) started: Stopwatch,
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
}

impl DrainingWorker {
    /// Declare the queues of `plugins`, fill them with `envelopes`, then start a worker
    /// with `config` whose deliveries `meter` times; the wall and CPU clocks start when the
    /// worker does.
    pub(crate) async fn start(
        backend: &Arc<RabbitMqBackend>,
        plugins: Plugins,
        envelopes: impl IntoIterator<Item = Envelope>,
        config: WorkerConfig,
    ) -> anyhow::Result<Self> {
        for config in plugins.current().queues() {
            backend.declare(config).await?;
        }
        fill(backend, envelopes).await?;
        let meter = Arc::new(Meter::default());
        let shutdown = CancellationToken::new();
        let backend = Metered::new(Arc::clone(backend), meter.clone());
        let started = Stopwatch::start()?;
        let worker = tokio::spawn(Worker::new(backend, plugins, config).run(shutdown.clone()));
        Ok(Self {
            meter,
            started,
            shutdown,
            worker,
        })
    }

    /// Stop the worker and wait for it.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        Ok(self.worker.await?)
    }
}

/// Consume `jobs` messages from `queue` with `prefetch` and ack each, nothing else: what
/// the broker can deliver to one consumer. Returns the wall and CPU time from the consume to
/// the last ack, and receive-to-acked times.
pub(crate) async fn consume_and_ack(
    connection: &Connection,
    queue: &str,
    prefetch: u16,
    jobs: usize,
) -> anyhow::Result<(Spent, Samples)> {
    let start = Stopwatch::start()?;
    let (channel, mut consumer) =
        subscribe(connection, queue, prefetch, "jobhost-bench-raw").await?;
    let mut latencies = Vec::with_capacity(jobs);
    // Acks are pipelined, one task each as a worker would: awaiting each ack before the
    // next receive would measure lapin's round trip to its I/O thread, not the broker.
    let mut acks = JoinSet::new();
    for _ in 0..jobs {
        let delivery = next_delivery(&mut consumer, queue).await?;
        let received = Instant::now();
        acks.spawn(async move {
            delivery
                .acker
                .ack(BasicAckOptions::default())
                .await
                .map(|_| received.elapsed())
        });
        while let Some(acked) = acks.try_join_next() {
            latencies.push(acked??);
        }
    }
    while let Some(acked) = acks.join_next().await {
        latencies.push(acked??);
    }
    let spent = start.read()?;
    channel.close(200, "done".into()).await?;
    Ok((spent, Samples::new(latencies)))
}

/// How many deliveries [`consume_and_ack_multiple`] acks with one `multiple` ack.
pub(crate) const ACK_EVERY: usize = 50;

/// Consume `jobs` messages from `queue` with `prefetch` and ack them [`ACK_EVERY`] at a
/// time with `multiple`, in the consume loop, with no task per delivery: the least a
/// lapin consumer can do per message, so the floor under every consumer built on lapin.
/// With `plugin`, each delivery also calls the no-op's handler in a fresh instance first:
/// the floor under a host on lapin that keeps an instance per job.
pub(crate) async fn consume_and_ack_multiple(
    connection: &Connection,
    queue: &str,
    prefetch: u16,
    jobs: usize,
    plugin: Option<&Plugin>,
) -> anyhow::Result<()> {
    let (channel, mut consumer) =
        subscribe(connection, queue, prefetch, "jobhost-bench-floor").await?;
    let multiple = BasicAckOptions { multiple: true };
    for received in 1..=jobs {
        let delivery = next_delivery(&mut consumer, queue).await?;
        if let Some(plugin) = plugin {
            invoke_noop(plugin).await?;
        }
        if received % ACK_EVERY == 0 || received == jobs {
            delivery.acker.ack(multiple).await?;
        }
    }
    channel.close(200, "done".into()).await?;
    Ok(())
}

/// Consume `jobs` jobs from `queue` with `prefetch`, each failing once, in the least a
/// lapin client can do per retry under at-least-once: a first delivery is published to
/// `hold` (persistent, on a confirm-mode channel) and acked once the broker confirmed that
/// publish; the second, back from the hold queue (dead-lettered, so it carries `x-death`),
/// is acked. No envelope, no handler, no policy: the retry scenario's reference for what
/// the broker allows a client that confirms each retry before its ack. Returns the retry
/// publishes per second between the first confirm and the last.
pub(crate) async fn retry_once_and_ack(
    connection: &Connection,
    queue: &str,
    hold: &str,
    prefetch: u16,
    jobs: usize,
) -> anyhow::Result<Option<f64>> {
    let publisher = connection.create_channel().await?;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let (channel, mut consumer) =
        subscribe(connection, queue, prefetch, "jobhost-bench-raw-retry").await?;
    // One task per delivery, as for `consume_and_ack`: a delivery waiting for its confirm
    // must not hold up the next.
    let mut settling = JoinSet::new();
    let confirmed = Arc::new(Events::default());
    let mut finished = 0;
    while finished < jobs {
        let delivery = next_delivery(&mut consumer, queue).await?;
        let retried = delivery
            .properties
            .headers()
            .as_ref()
            .is_some_and(|headers| headers.contains_key("x-death"));
        finished += usize::from(retried);
        let publisher = publisher.clone();
        let hold = hold.to_owned();
        let confirmed = Arc::clone(&confirmed);
        settling.spawn(async move {
            if !retried {
                let persistent = BasicProperties::default().with_delivery_mode(2);
                let confirmation = publisher
                    .basic_publish(
                        "".into(),
                        hold.as_str().into(),
                        BasicPublishOptions::default(),
                        &delivery.data,
                        persistent,
                    )
                    .await?
                    .await?;
                anyhow::ensure!(
                    confirmation.is_ack(),
                    "the broker refused a retry: {confirmation:?}"
                );
                confirmed.record();
            }
            delivery.acker.ack(BasicAckOptions::default()).await?;
            Ok(())
        });
        while let Some(settled) = settling.try_join_next() {
            settled??;
        }
    }
    while let Some(settled) = settling.join_next().await {
        settled??;
    }
    channel.close(200, "done".into()).await?;
    publisher.close(200, "done".into()).await?;
    Ok(confirmed.rate())
}

/// Declare `queue`'s hold queue for `ttl`: messages dead-letter back onto `queue` when
/// they expire. Without the `x-expires` the host adds, which only a declaration renews.
pub(crate) async fn declare_hold(
    connection: &Connection,
    queue: &str,
    hold: &HoldQueue,
) -> anyhow::Result<()> {
    let channel = connection.create_channel().await?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(i64::try_from(hold.ttl_ms)?),
    );
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(queue.into()),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(hold.name.as_str().into(), durable, arguments)
        .await?;
    let _ = channel.close(200, "done".into()).await;
    Ok(())
}

/// A channel with `prefetch` consuming `queue` as `tag`.
async fn subscribe(
    connection: &Connection,
    queue: &str,
    prefetch: u16,
    tag: &str,
) -> anyhow::Result<(Channel, Consumer)> {
    let channel = connection.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            queue.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((channel, consumer))
}

/// The next delivery of `consumer`, or an error when the broker cancelled it.
pub(crate) async fn next_delivery(
    consumer: &mut Consumer,
    queue: &str,
) -> anyhow::Result<Delivery> {
    std::future::poll_fn(|cx| Pin::new(&mut *consumer).poll_next(cx))
        .await
        .ok_or_else(|| anyhow::anyhow!("the broker cancelled the consumer of `{queue}`"))?
        .map_err(Into::into)
}

/// Messages ready in `queue`, or `None` when it does not exist (the probe then costs its
/// channel, which the broker closes).
pub(crate) async fn depth(connection: &Connection, queue: &str) -> anyhow::Result<Option<u32>> {
    let channel = connection.create_channel().await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let Ok(declared) = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
    else {
        return Ok(None);
    };
    let _ = channel.close(200, "done".into()).await;
    Ok(Some(declared.message_count()))
}

/// The hold queue of `queue` for a 1 s delay, the one the retry scenarios wait in.
pub(crate) fn one_second_hold(queue: &str) -> anyhow::Result<HoldQueue> {
    let delay = Granularity::default().round(Duration::from_secs(1))?;
    Ok(HoldQueue::for_delay(queue, delay))
}

/// Delete `queue`, its dead-letter queue and its 1 s hold queue, whichever exist.
pub(crate) async fn delete(connection: &Connection, queue: &str) -> anyhow::Result<()> {
    let hold = one_second_hold(queue)?.name;
    for name in [queue.to_owned(), dead_letter_queue_name(queue), hold] {
        let channel = connection.create_channel().await?;
        // RabbitMQ answers a delete of a missing queue with success.
        channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await?;
        let _ = channel.close(200, "done".into()).await;
    }
    Ok(())
}
