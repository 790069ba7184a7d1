//! Interoperability with `queuey` 1.x on the same broker: same envelope, same
//! properties, same topology, in both directions.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jobhost::broker::{Backend, Consumer, Delivery};
use jobhost::envelope::Envelope;
use jobhost::job::Deadline;
use jobhost_sdk::QueueConfig;
use lapin::types::{AMQPValue, ShortString};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::support::{Cleanup, PATIENCE, amqp_url, backend, raw_channel, take, unique, within};

/// A queuey queue set of one queue whose name is only known at run time, so that each
/// run of the test uses queues of its own.
macro_rules! runtime_named_queue_set {
    ($set:ident, $what:literal) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        enum $set {
            Only,
        }

        impl queuey::QueueSet for $set {
            fn all() -> &'static [Self] {
                &[Self::Only]
            }

            fn name(&self) -> &'static str {
                static NAME: OnceLock<String> = OnceLock::new();
                NAME.get_or_init(|| unique($what))
            }

            fn config(&self) -> queuey::QueueConfig {
                queuey::QueueConfig::new(self.name())
            }
        }
    };
}

runtime_named_queue_set!(WorkerQueues, "queuey-worker");
runtime_named_queue_set!(ProducerQueues, "queuey-producer");

#[derive(Debug, Serialize, Deserialize)]
struct Ping {
    n: u32,
}

impl queuey::Job for Ping {
    type Queue = WorkerQueues;
    const NAME: &'static str = "interop::Ping";
    const QUEUE: WorkerQueues = WorkerQueues::Only;
}

#[derive(Debug, Serialize, Deserialize)]
struct Pong {
    n: u32,
}

impl queuey::Job for Pong {
    type Queue = ProducerQueues;
    const NAME: &'static str = "interop::Pong";
    const QUEUE: ProducerQueues = ProducerQueues::Only;
}

/// A queuey handler that reports what it was given.
struct Record(mpsc::UnboundedSender<(Ping, queuey::JobContext)>);

#[queuey::async_trait]
impl queuey::JobHandler for Record {
    type Job = Ping;

    async fn handle(&self, job: Ping, ctx: queuey::JobContext) -> Result<(), queuey::JobError> {
        let _ = self.0.send((job, ctx));
        Ok(())
    }
}

async fn queuey_backend() -> Arc<queuey::RabbitMqBackend> {
    let backend = queuey::RabbitMqBackend::connect(&amqp_url())
        .await
        .expect("queuey connects to the broker jobhost reached");
    Arc::new(backend)
}

#[tokio::test]
async fn a_job_jobhost_publishes_decodes_as_a_queuey_envelope_and_runs_in_a_queuey_worker() {
    let Some(backend) = backend(&unique("queuey")).await else {
        return;
    };
    let name = queuey::QueueSet::name(&WorkerQueues::Only);
    let _cleanup = Cleanup::new(&[name]);
    backend
        .declare(&QueueConfig::new(name))
        .await
        .expect("declared");
    let payload = RawValue::from_string(r#"{"n":7}"#.to_owned()).expect("valid json");
    // With a deadline, which queuey does not know and ignores.
    let job = Envelope {
        expires_at_ms: Some(Deadline::from_now(Duration::from_secs(600))),
        ..Envelope::new("interop::Ping", name, payload).deferred(10)
    };

    let theirs = queuey::Envelope::from_bytes(&job.encode()).expect("queuey decodes our body");
    assert_eq!(theirs.job_id, job.job_id);
    assert_eq!(
        (theirs.job_type.as_str(), theirs.queue.as_str()),
        ("interop::Ping", name)
    );
    assert_eq!(
        (theirs.attempt, theirs.deferrals, theirs.priority),
        (1, 1, 10)
    );
    assert_eq!(theirs.enqueued_at_ms, job.enqueued_at_ms);

    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let worker = queuey::Worker::<WorkerQueues, _>::builder(queuey_backend().await)
        .handler(Record(seen_tx))
        .build()
        .await
        .expect("queuey declares the same queue without conflict");
    let stop = worker.handle();
    let running = tokio::spawn(worker.run());

    backend.publish(&job, None).await.expect("confirmed");
    let (ping, ctx) = within(PATIENCE, "the queuey handler", seen.recv())
        .await
        .expect("handled");
    assert_eq!(ping.n, 7);
    assert_eq!(ctx.job_id, job.job_id);
    assert_eq!((ctx.attempt, ctx.deferrals, ctx.priority), (1, 1, 10));

    stop.shutdown();
    within(PATIENCE, "the queuey worker to stop", running)
        .await
        .expect("the worker task")
        .expect("the worker stops cleanly");
}

#[tokio::test]
async fn a_job_queuey_enqueues_is_consumed_by_jobhost_with_the_same_envelope_and_headers() {
    let Some(backend) = backend(&unique("queuey")).await else {
        return;
    };
    let name = queuey::QueueSet::name(&ProducerQueues::Only);
    let _cleanup = Cleanup::new(&[name]);
    let producer = queuey::Producer::<ProducerQueues, _>::new(queuey_backend().await)
        .await
        .expect("queuey declares its queues");
    let inspected_id = producer.enqueue(&Pong { n: 1 }).await.expect("enqueued");
    let consumed_id = producer.enqueue(&Pong { n: 2 }).await.expect("enqueued");

    let raw = take(&raw_channel().await, name)
        .await
        .expect("queuey's first job");
    let header = |key: &str| raw.properties.headers().as_ref()?.inner().get(key).cloned();
    assert_eq!(header("x-attempt"), Some(AMQPValue::LongUInt(1)));
    assert_eq!(header("x-deferrals"), Some(AMQPValue::LongUInt(0)));
    assert_eq!(
        raw.properties
            .message_id()
            .as_ref()
            .map(ShortString::to_string),
        Some(inspected_id.to_string())
    );
    let inspected = Envelope::decode(&raw.data).expect("our envelope decodes queuey's body");
    assert_eq!(inspected.job_id, inspected_id);

    let config = QueueConfig::new(name);
    let mut consumer = backend.consume(&config).await.expect("subscribed");
    let delivery = within(PATIENCE, "queuey's second job", consumer.next())
        .await
        .expect("delivered");
    let envelope = Envelope::decode(delivery.body()).expect("our envelope decodes queuey's body");
    assert_eq!(envelope.job_id, consumed_id);
    assert_eq!(
        (envelope.job_type.as_str(), envelope.queue.as_str()),
        ("interop::Pong", name)
    );
    assert_eq!(
        (envelope.attempt, envelope.deferrals, envelope.priority),
        (1, 0, 0)
    );
    assert_eq!(envelope.payload.get(), r#"{"n":2}"#);
    delivery.ack().await.expect("acked");
    consumer.close().await;
}
