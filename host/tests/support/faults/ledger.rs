//! The suite's own record of outcomes, kept apart from the host: the `ledger` fixture
//! records each completed `ledger.Work` as a dead letter on `test.ledger.done.dead`, and the
//! host dead-letters what it refuses on `test.ledger.work.dead`; this ledger drains both
//! with plain lapin and counts by job id.
//!
//! The fixture's queue names are compiled into the plugin, so each instance of the fixture
//! ([`LedgerQueues::classic`]) lives in a virtual host of its own, deleted with everything
//! in it when the last clone drops: two tests (or two checkouts' runs on one broker) never
//! share its queues, its fleet's control stream or its scheduler lead. Callers ask the
//! instance for its URL and its queue names.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use jobhost::broker::{Backend, RabbitMqBackend, RabbitMqOptions};
use jobhost::envelope::Envelope;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, Consumer};
use serde_json::value::RawValue;
use tokio::task::JoinSet;

use super::table::Row;
use crate::support::{Vhost, raw_channel_at, within};

/// The queue of `ledger.Work` in the `ledger` fixture.
const WORK_QUEUE: &str = "test.ledger.work";
/// The queue of `ledger.Done`, the records, in the `ledger` fixture.
const DONE_QUEUE: &str = "test.ledger.done";
/// The queues of the `ledger-quorum` fixture.
const QUORUM_WORK_QUEUE: &str = "test.qledger.work";
const QUORUM_DONE_QUEUE: &str = "test.qledger.done";

/// Where a ledger reads: a broker node and the fixture's two queues.
#[derive(Debug, Clone)]
pub(crate) struct LedgerQueues {
    /// One broker node (not a list).
    pub(crate) url: String,
    /// The queue of `ledger.Work`; the host dead-letters what it refuses to `{work}.dead`.
    pub(crate) work: &'static str,
    /// The queue of `ledger.Done`; the records are its dead letters.
    pub(crate) done: &'static str,
    /// The virtual host the queues are in, when made for this instance; deleted when the
    /// last clone drops.
    pub(crate) vhost: Option<Arc<Vhost>>,
}

impl LedgerQueues {
    /// The `ledger` fixture's classic queues, in a new virtual host of the test broker.
    pub(crate) fn classic() -> Self {
        let vhost = Vhost::new("ledger");
        Self {
            url: vhost.url.clone(),
            work: WORK_QUEUE,
            done: DONE_QUEUE,
            vhost: Some(Arc::new(vhost)),
        }
    }

    /// The `ledger-quorum` fixture's quorum queues on the broker node `url`, in its default
    /// virtual host: for a cluster of the test's own.
    pub(crate) fn quorum(url: String) -> Self {
        Self {
            url,
            work: QUORUM_WORK_QUEUE,
            done: QUORUM_DONE_QUEUE,
            vhost: None,
        }
    }

    /// The name of the virtual host made for this instance, for `rabbitmqctl -p`.
    pub(crate) fn vhost_name(&self) -> &str {
        self.vhost
            .as_deref()
            .map(|vhost| vhost.name.as_str())
            .expect("a ledger of a virtual host of its own")
    }

    /// A plain lapin channel to the queues' broker and virtual host.
    pub(crate) async fn raw_channel(&self) -> Channel {
        raw_channel_at(&self.url).await
    }

    /// A backend on the queues' broker and virtual host.
    pub(crate) async fn backend(&self, connection: &str) -> RabbitMqBackend {
        RabbitMqBackend::connect(
            &self.url,
            RabbitMqOptions::default().connection_name(connection),
        )
        .await
        .expect("a connection to the ledger's virtual host")
    }

    /// The envelope of a `ledger.Work` on the work queue that fails `fail_times` attempts
    /// before it completes.
    pub(crate) fn work(&self, id: u64, fail_times: u32) -> Envelope {
        work_on(self.work, id, fail_times, 0)
    }
}

/// A message the host dead-lettered from the work queue.
#[derive(Debug)]
pub(crate) struct DeadLetter {
    pub(crate) body: Vec<u8>,
    pub(crate) reason: String,
}

/// Completion records by ledger id, and the work queue's dead letters.
#[derive(Debug)]
pub(crate) struct Ledger {
    queues: LedgerQueues,
    /// The consumers of both queues; `None` until the next drain opens them again.
    reader: Option<Reader>,
    records: HashMap<u64, usize>,
    /// Records of batch callbacks (`ledger.Done` jobs a batch enqueued, whose payload is
    /// the batch's, not an id), by job id.
    callbacks: HashMap<uuid::Uuid, usize>,
    dead: Vec<DeadLetter>,
}

/// How long a scenario of `jobs` jobs may take: generous for a debug build on a loaded
/// 2-core machine, a minute plus 20 ms a job.
pub(crate) fn patience(jobs: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(20) * u32::try_from(jobs).unwrap_or(u32::MAX)
}

/// `n` ledger ids no earlier run used, so a record a previous (aborted) run left in a hold
/// queue is never mistaken for one of ours.
pub(crate) fn fresh_ids(n: usize) -> Vec<u64> {
    let base = u64::from(rand::random::<u32>()) << 24;
    (base..).take(n).collect()
}

impl Ledger {
    /// A ledger of the fixture's queues `queues`; it connects at its first drain.
    pub(crate) async fn open_on(queues: LedgerQueues) -> Self {
        Self {
            queues,
            reader: None,
            records: HashMap::new(),
            callbacks: HashMap::new(),
            dead: Vec::new(),
        }
    }

    /// Where this ledger reads.
    pub(crate) fn queues(&self) -> &LedgerQueues {
        &self.queues
    }

    /// Read through a new connection, because a broker fault closed the old one.
    pub(crate) async fn reconnect(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.close().await;
        }
    }

    /// Move what the broker delivers for the ledger now into this tally. A read the broker
    /// fails (a cluster electing a queue's new leader, a restart) is given up and the
    /// connection closed: what was not acknowledged is delivered again to the next drain.
    pub(crate) async fn drain(&mut self) {
        if let Err(error) = self.try_drain().await {
            eprintln!(
                "ledger: reading the broker failed ({error}); reading on through a new connection"
            );
            self.reconnect().await;
        }
    }

    async fn try_drain(&mut self) -> Result<(), lapin::Error> {
        if self.reader.is_none() {
            self.reader = Some(Reader::open(&self.queues).await?);
        }
        let reader = self.reader.as_mut().expect("opened above");
        for record in reader.records.take().await? {
            if let Some(job_id) = callback_job(&record.data) {
                *self.callbacks.entry(job_id).or_default() += 1;
                continue;
            }
            let id = ledger_id(&record.data)
                .unwrap_or_else(|| panic!("a ledger record carries an id: {:?}", record.data));
            *self.records.entry(id).or_default() += 1;
        }
        for letter in reader.refused.take().await? {
            let reason = letter
                .properties
                .headers()
                .as_ref()
                .and_then(|headers| match headers.inner().get("x-death-reason") {
                    Some(AMQPValue::LongString(reason)) => {
                        Some(String::from_utf8_lossy(reason.as_bytes()).into_owned())
                    }
                    _ => None,
                })
                .expect("every dead letter carries `x-death-reason`");
            self.dead.push(DeadLetter {
                body: letter.data,
                reason,
            });
        }
        Ok(())
    }

    /// How many records the batch callback job `job_id` has.
    pub(crate) fn callback_records(&self, job_id: uuid::Uuid) -> usize {
        self.callbacks.get(&job_id).copied().unwrap_or(0)
    }

    /// How many of `ids` have at least one record.
    pub(crate) fn completed(&self, ids: &[u64]) -> usize {
        ids.iter()
            .filter(|id| self.records.contains_key(id))
            .count()
    }

    /// What must not happen, watched for `span`: no job of `ids` completes.
    pub(crate) async fn none_complete(&mut self, ids: &[u64], span: Duration, while_: &str) {
        let watched = tokio::time::Instant::now();
        while watched.elapsed() < span {
            self.drain().await;
            assert_eq!(self.completed(ids), 0, "no job runs while {while_}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Drain until every one of `ids` has a record, failing after `limit`.
    pub(crate) async fn wait_for_all(&mut self, ids: &[u64], limit: Duration, what: &str) {
        self.wait_for(ids, ids.len(), limit, what).await;
    }

    /// Drain until at least `count` of `ids` have a record, failing after `limit`; returns
    /// how many have.
    pub(crate) async fn wait_for(
        &mut self,
        ids: &[u64],
        count: usize,
        limit: Duration,
        what: &str,
    ) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.drain().await;
            let completed = self.completed(ids);
            if completed >= count {
                return completed;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: only {completed} of {} jobs completed within {limit:?}",
                ids.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drain until at least `count` dead letters are in, failing after `limit`; hands them
    /// over like [`Ledger::take_dead`].
    pub(crate) async fn wait_for_dead(&mut self, count: usize, limit: Duration) -> Vec<DeadLetter> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.drain().await;
            if self.dead.len() >= count {
                return self.take_dead();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {count} dead letters arrived within {limit:?}",
                self.dead.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The work queue's dead letters drained so far, handed over once.
    pub(crate) fn take_dead(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead)
    }

    /// The row of a scenario that sent `ids`, and the dead letters it caused.
    pub(crate) fn row(&self, scenario: &str, ids: &[u64], dead: &[DeadLetter]) -> Row {
        let mut by_reason = BTreeMap::new();
        for letter in dead {
            *by_reason.entry(letter.reason.clone()).or_default() += 1;
        }
        Row {
            sent: ids.len() + dead.len(),
            completed: self.completed(ids),
            duplicated: ids
                .iter()
                .filter_map(|id| self.records.get(id))
                .map(|n| n - 1)
                .sum(),
            dead: by_reason,
            ..Row::new(scenario)
        }
    }
}

/// The job id of a record that is a batch callback's `ledger.Done` (its payload names the
/// callback).
fn callback_job(body: &[u8]) -> Option<uuid::Uuid> {
    let envelope = Envelope::decode(body).ok()?;
    let payload: serde_json::Value = serde_json::from_str(envelope.payload.get()).ok()?;
    payload["callback"].is_string().then_some(envelope.job_id)
}

/// The `id` in the payload of a record's `ledger.Done` envelope, or of a dead `ledger.Work`.
pub(crate) fn ledger_id(body: &[u8]) -> Option<u64> {
    let envelope = Envelope::decode(body).ok()?;
    let payload: serde_json::Value = serde_json::from_str(envelope.payload.get()).ok()?;
    payload["id"].as_u64()
}

/// The envelope of a `ledger.Work` on `queue` that defers itself `defer_times` times, then
/// fails `fail_times` attempts before it completes.
pub(crate) fn work_on(queue: &str, id: u64, fail_times: u32, defer_times: u32) -> Envelope {
    let payload = serde_json::json!({
        "id": id,
        "fail_times": fail_times,
        "defer_times": defer_times,
    })
    .to_string();
    let payload = RawValue::from_string(payload).expect("JSON");
    Envelope::new("ledger.Work", queue, payload)
}

/// Publish `jobs` through `backend`, several confirms in flight at once.
pub(crate) async fn publish_all(backend: &Arc<RabbitMqBackend>, jobs: Vec<Envelope>) {
    const PUBLISHERS: usize = 8;
    let per_task = jobs.len().div_ceil(PUBLISHERS).max(1);
    let mut tasks = JoinSet::new();
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        let chunk: Vec<Envelope> = jobs.by_ref().take(per_task).collect();
        let backend = backend.clone();
        tasks.spawn(async move {
            for envelope in chunk {
                backend
                    .publish(&envelope, None)
                    .await
                    .expect("the broker confirms a ledger job");
            }
        });
    }
    within(
        Duration::from_secs(300),
        "the ledger jobs to be published",
        tasks.join_all(),
    )
    .await;
}

/// Deliveries the broker pushes ahead of the ledger's acknowledgements, per queue. A
/// consumer, not `basic.get`: on a quorum queue each get is a replicated command of its
/// own, too slow to keep up with two hosts recording.
const PREFETCH: u16 = 1_000;
/// How long one drain waits for a queue's first delivery.
const QUIET: Duration = Duration::from_millis(50);

/// One connection consuming both of the ledger's queues, each on a channel of its own so
/// that one acknowledgement with `multiple` covers exactly one queue's deliveries.
#[derive(Debug)]
struct Reader {
    connection: Connection,
    records: QueueReader,
    refused: QueueReader,
}

impl Reader {
    async fn open(queues: &LedgerQueues) -> Result<Self, lapin::Error> {
        let connection = Connection::connect(&queues.url, ConnectionProperties::default()).await?;
        let records = QueueReader::open(&connection, format!("{}.dead", queues.done)).await?;
        let refused = QueueReader::open(&connection, format!("{}.dead", queues.work)).await?;
        Ok(Self {
            connection,
            records,
            refused,
        })
    }

    /// Close the connection, so the broker delivers what it did not see acknowledged again;
    /// bounded, because the connection may be dead already.
    async fn close(self) {
        let closing = self.connection.close(200, "the ledger reconnects".into());
        let _ = tokio::time::timeout(Duration::from_secs(5), closing).await;
    }
}

/// A consumer of one queue, acknowledged in batches.
#[derive(Debug)]
struct QueueReader {
    channel: Channel,
    consumer: Consumer,
}

impl QueueReader {
    async fn open(connection: &Connection, queue: String) -> Result<Self, lapin::Error> {
        let channel = connection.create_channel().await?;
        channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                queue.into(),
                "jobhost-ledger".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self { channel, consumer })
    }

    /// What the broker has delivered, waiting at most [`QUIET`] for a first delivery; the
    /// batch is acknowledged before it is handed over, so a batch whose acknowledgement
    /// fails is delivered again instead of counted twice.
    async fn take(&mut self) -> Result<Vec<Delivery>, lapin::Error> {
        let mut batch = Vec::new();
        if let Ok(first) = tokio::time::timeout(QUIET, self.consumer.next()).await {
            batch.push(delivered(first)?);
            while batch.len() < usize::from(PREFETCH) {
                let Some(next) = self.consumer.next().now_or_never() else {
                    break;
                };
                batch.push(delivered(next)?);
            }
        }
        if let Some(last) = batch.last() {
            self.channel
                .basic_ack(last.delivery_tag, BasicAckOptions { multiple: true })
                .await?;
        }
        Ok(batch)
    }
}

/// A consumer's next item as a delivery; a consumer that ended (its channel or queue went
/// away) is an error like any other read the broker failed.
fn delivered(item: Option<Result<Delivery, lapin::Error>>) -> Result<Delivery, lapin::Error> {
    item.unwrap_or(Err(lapin::Error::from(
        lapin::ErrorKind::InvalidChannelState(
            lapin::ChannelState::Closed,
            "the ledger's consumer ended",
        ),
    )))
}
