//! Fleet-wide concurrency caps on RabbitMQ: a cap's permits are the messages of its permit
//! queue, and a host holds one by leaving it unacked while the job runs
//! (docs/flow-control.md has the guarantee and the races).
//!
//! # Contract
//! - Taking is one `basic.get` on a channel that holds nothing else: a permit comes back
//!   as a [`RabbitMqLease`], which keeps its channel until the permit is given back
//!   (`basic.reject`, requeue) when the lease is dropped. One channel per lease, because a
//!   channel the broker closes (a queue deleted under a `basic.get`) gives back every
//!   permit on it while their jobs still run.
//! - A host whose connection ends (killed, partitioned) gives back every permit it held:
//!   the broker requeues the unacked messages of a closed connection.
//! - A permit queue is made once per life: `basic.get` on a missing one declares, under a
//!   lock, the queue (`x-max-length = limit`, `x-overflow = reject-publish`, `x-expires`)
//!   and publishes its `limit` permits, confirmed. The lock is an exclusive queue
//!   `{permit queue}.lock`: the broker lets one connection hold it, and removes it with
//!   that connection, so two hosts never fill one permit queue twice and a host that dies
//!   holding it blocks no one. A host that finds the lock taken waits for the holder.
//!   Within a host, whose tasks share one connection and so one lock, a mutex of the
//!   session lets one task make permit queues at a time.
//! - A message of the permit queue that is not one of its permits (its `type` and body
//!   say so) is acked away with a warning, so garbage published there never counts as a
//!   permit and never blocks one; a take reads at most `limit + 1` messages.

use std::sync::Weak;
use std::time::Duration;

use futures_util::future::try_join_all;
use lapin::Acker;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicRejectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

use super::session::{Failure, Session};
use crate::broker::{BrokerError, Permits};

/// The `type` property of a permit message.
const PERMIT_TYPE: &str = "jobhost.permit";

/// How often a host that finds the lock taken looks again, and how long it waits between.
const LOCK_TRIES: u32 = 20;
const LOCK_WAIT: Duration = Duration::from_millis(50);

/// One permit held on RabbitMQ. Dropping it gives the permit back; a host that dies gives
/// back all of its permits with its connection.
#[derive(Debug)]
pub struct RabbitMqLease {
    held: Option<(Channel, Acker)>,
    session: Weak<Session>,
}

impl Drop for RabbitMqLease {
    fn drop(&mut self) {
        let Some((channel, acker)) = self.held.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Dropping the channel closes it, and the broker requeues its permit.
            return;
        };
        let session = self.session.clone();
        runtime.spawn(async move {
            let requeue = BasicRejectOptions { requeue: true };
            // A reject that failed leaves the channel to close, which gives the permit back
            // all the same.
            if let Ok(true) = acker.reject(requeue).await
                && let Some(session) = session.upgrade()
            {
                session.keep_permit_channel(channel);
            }
        });
    }
}

/// Take one of `permits` on `session`: `None` when every permit is held.
pub(super) async fn take(
    session: &std::sync::Arc<Session>,
    permits: &Permits,
) -> Result<Option<RabbitMqLease>, Failure> {
    let mut made = false;
    let mut channel = session.permit_channel().await.map_err(Failure::Lost)?;
    let mut garbage = 0;
    loop {
        let get = channel
            .basic_get(
                permits.name.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await;
        let message = match get {
            Ok(message) => message,
            Err(error) if error.is_amqp_soft_error() && !made => {
                // The queue does not exist (yet, or any more): make it, then look again on
                // a new channel, because the broker closed this one.
                make(session, permits).await?;
                made = true;
                channel = session.permit_channel().await.map_err(Failure::Lost)?;
                continue;
            }
            Err(error) => return Err(Failure::classify(&permits.name, error)),
        };
        let Some(message) = message else {
            session.keep_permit_channel(channel);
            return Ok(None);
        };
        let delivery = message.delivery;
        if is_permit(&delivery.properties, &delivery.data, permits) {
            return Ok(Some(RabbitMqLease {
                held: Some((channel, delivery.acker)),
                session: std::sync::Arc::downgrade(session),
            }));
        }
        tracing::warn!(queue = %permits.name, "dropping a message of a permit queue that is not one of its permits");
        delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .map_err(Failure::Lost)?;
        garbage += 1;
        if garbage > permits.limit {
            session.keep_permit_channel(channel);
            return Ok(None);
        }
    }
}

/// Whether a message of `permits`' queue is one of its permits.
fn is_permit(properties: &BasicProperties, body: &[u8], permits: &Permits) -> bool {
    is_marked(properties, body, PERMIT_TYPE, &permits.name)
}

/// Whether a message of `queue` is one of the host's own marks there: its `type` is `kind`
/// and its body the queue's name (a permit of a permit queue, a token of a token queue).
pub(super) fn is_marked(
    properties: &BasicProperties,
    body: &[u8],
    kind: &str,
    queue: &str,
) -> bool {
    properties
        .kind()
        .as_ref()
        .is_some_and(|marked| marked.as_str() == kind)
        && body == queue.as_bytes()
}

/// Make `permits`' queue with its permits, unless another host, or another task of this
/// one, made it first.
async fn make(session: &Session, permits: &Permits) -> Result<(), Failure> {
    let _making = session.making_permits.lock().await;
    let lock = format!("{}.lock", permits.name);
    for attempt in 0..LOCK_TRIES {
        let channel = session.channel().await.map_err(Failure::Lost)?;
        let exclusive = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        match channel
            .queue_declare(lock.as_str().into(), exclusive, FieldTable::default())
            .await
        {
            Ok(_) => {
                let made = fill(session, permits).await;
                // Best effort: the broker removes the lock with this connection anyway.
                let _ = channel
                    .queue_delete(lock.as_str().into(), QueueDeleteOptions::default())
                    .await;
                return made;
            }
            // Another connection holds the lock: it is making the queue now. Wait for the
            // lock rather than for the queue, because the queue exists before its permits
            // are published: a look in between would find none and throttle for nothing.
            Err(error) if error.is_amqp_soft_error() => {
                tokio::time::sleep(LOCK_WAIT * (attempt + 1)).await;
            }
            Err(error) => return Err(Failure::Lost(error)),
        }
    }
    Err(Failure::Final(BrokerError::Refused {
        queue: permits.name.clone(),
        reason: format!("another connection held `{lock}` for too long"),
    }))
}

/// Under the lock: declare the permit queue and publish its permits, unless it exists.
async fn fill(session: &Session, permits: &Permits) -> Result<(), Failure> {
    if session.messages_in(&permits.name).await?.is_some() {
        return Ok(());
    }
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(permits.name.as_str().into(), durable, arguments(permits))
        .await
        .map_err(|error| Failure::classify(&permits.name, error))?;
    let properties = BasicProperties::default()
        .with_type(PERMIT_TYPE.into())
        .with_delivery_mode(2);
    let body = permits.name.as_bytes();
    try_join_all(
        (0..permits.limit).map(|_| session.publish(&permits.name, body, properties.clone())),
    )
    .await?;
    tracing::debug!(queue = %permits.name, limit = permits.limit, "permit queue made");
    Ok(())
}

/// The permit queue's arguments: never more than `limit` ready, whoever publishes, and
/// gone once unused for [`Permits::expires`].
fn arguments(permits: &Permits) -> FieldTable {
    bounded_queue(permits.limit, permits.expires())
}

/// The arguments of a queue that never holds more than `max_length` ready messages,
/// refusing what would be more, and is gone once unused for `expires`: a permit queue's,
/// and a token queue's.
pub(super) fn bounded_queue(max_length: u32, expires: Duration) -> FieldTable {
    let expires = u32::try_from(expires.as_millis()).unwrap_or(u32::MAX);
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-max-length".into(),
        AMQPValue::LongLongInt(i64::from(max_length)),
    );
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    arguments.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(i64::from(expires)),
    );
    arguments
}
