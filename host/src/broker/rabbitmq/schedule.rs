//! [`Schedules`] on RabbitMQ: the lead is the token message of the single-active-consumer
//! queue [`LEADER_QUEUE`], and each schedule's last firings a durable queue of [`HISTORY`]
//! persistent messages.
//!
//! - **Leading** is holding the token. Every host consumes [`LEADER_QUEUE`] (durable,
//!   `x-single-active-consumer`, at most one ready message), prefetch 1, never acking: the
//!   broker delivers only to the one active consumer, so the host that holds a delivery
//!   leads. When its channel or connection goes (a killed host, a lost network, a broker
//!   restart), the broker hands the token back and delivers it to the next consumer, which
//!   then leads. A host that does not lead publishes a token when the queue has none
//!   ready (a purged queue, the first host ever); extra tokens wait ready, because only the
//!   active consumer is delivered any, and it holds one.
//! - The leader hands its token back and takes it again every [`TOKEN_REFRESH`], so the
//!   broker's consumer timeout (30 minutes by default) never closes its channel; the
//!   active consumer stays active, so the token comes back to it.
//! - Asking who leads never closes a channel: an exclusive queue would answer the others
//!   with `RESOURCE_LOCKED`, which closes their channel and makes the client library log
//!   an error every second on every standby host.
//! - **Recording** declares [`history_queue_name`] (durable, `x-max-length` = [`HISTORY`],
//!   dropping the oldest) and publishes the firing there, persistent and confirmed; how a
//!   firing's job ended goes the same way into [`endings_queue_name`].
//! - **Reading** takes up to [`HISTORY`] messages from that queue with `basic.get`, unacked,
//!   on a channel of its own, and closes the channel, which hands them all back in their
//!   order. A reader racing another sees fewer firings for that round trip; a scheduler
//!   reads once when it takes the lead, and the per-tick lock covers what it misses.

use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Acker, BasicProperties, Channel, Consumer};
use uuid::Uuid;

use super::RabbitMqBackend;
use super::session::{Failure, Session};
use crate::broker::BrokerError;
use crate::broker::schedule::{
    Ended, Firing, HISTORY, LEADER_QUEUE, Record, Schedules, endings_queue_name,
    history_queue_name, joined,
};

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// How long the leader holds its token before it hands it back and takes it again.
const TOKEN_REFRESH: Duration = Duration::from_secs(300);

/// How long a leader that handed its token back waits for it to come back.
const TOKEN_RETURN: Duration = Duration::from_secs(2);

/// This backend's seat among the fleet's schedulers: its consumer of [`LEADER_QUEUE`] on
/// one session, and the token when it holds it.
#[derive(Debug, Default)]
pub(super) struct Seat(tokio::sync::Mutex<Option<Sitting>>);

#[derive(Debug)]
struct Sitting {
    /// The session whose connection the consumer is on.
    generation: u64,
    channel: Channel,
    consumer: Consumer,
    /// The token, and when it came.
    token: Option<(Acker, Instant)>,
}

impl Schedules for RabbitMqBackend {
    async fn lead(&self, _candidate: Uuid) -> Result<bool, BrokerError> {
        // The connection is the candidate: the broker knows no other identity.
        let session = self.link.session().await?;
        let mut seat = self.seat.0.lock().await;
        let stale = seat.as_ref().is_none_or(|sitting| {
            sitting.generation != session.generation || !sitting.channel.status().connected()
        });
        if stale {
            *seat = None;
            let sitting = sit(&session).await.map_err(|failure| match failure {
                Failure::Final(error) => error,
                Failure::Lost(error) => BrokerError::Connection(error.to_string()),
            })?;
            *seat = Some(sitting);
        }
        let sitting = seat.as_mut().expect("seated above");
        if !take_token(sitting) {
            *seat = None;
            return Ok(false);
        }
        if let Some((acker, since)) = &sitting.token
            && since.elapsed() >= TOKEN_REFRESH
        {
            // Handed back to the active consumer, this one: the broker's delivery timer
            // starts again.
            let _ = acker.nack(requeue()).await;
            sitting.token = None;
            if let Ok(Some(Ok(delivery))) =
                tokio::time::timeout(TOKEN_RETURN, sitting.consumer.next()).await
            {
                sitting.token = Some((delivery.acker, Instant::now()));
            }
        }
        if sitting.token.is_none() {
            offer_token(&session).await;
        }
        Ok(sitting.token.is_some())
    }

    async fn resign(&self, _candidate: Uuid) {
        // Closing the channel hands the token to the next consumer.
        if let Some(sitting) = self.seat.0.lock().await.take() {
            close(&sitting.channel).await;
        }
    }

    async fn record(&self, schedule: &str, firing: &Firing) -> Result<(), BrokerError> {
        self.keep(&history_queue_name(schedule), &firing.encode())
            .await
    }

    async fn record_end(&self, schedule: &str, ended: &Ended) -> Result<(), BrokerError> {
        self.keep(&endings_queue_name(schedule), &ended.encode())
            .await
    }

    async fn firings(&self, schedule: &str) -> Result<Vec<Firing>, BrokerError> {
        // Endings first: read after the firings, a tick that fired and ended in between
        // would push the oldest listed firing's ending out of the bounded endings queue.
        let endings = self
            .read(&endings_queue_name(schedule), Ended::decode)
            .await?;
        let firings = self
            .read(&history_queue_name(schedule), Firing::decode)
            .await?;
        Ok(joined(firings, &endings))
    }
}

impl RabbitMqBackend {
    /// Publish `body` into the history queue `queue`, persistent and confirmed.
    async fn keep(&self, queue: &str, body: &[u8]) -> Result<(), BrokerError> {
        self.link
            .run(|session| async move {
                declare_history(&session, queue).await?;
                let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
                session.publish(queue, body, properties).await
            })
            .await
    }

    /// The records of the history queue `queue` that `decode` reads, oldest first.
    async fn read<T>(
        &self,
        queue: &str,
        decode: fn(&[u8]) -> Option<T>,
    ) -> Result<Vec<T>, BrokerError> {
        self.link
            .run(|session| async move {
                declare_history(&session, queue).await?;
                let channel = session.channel().await.map_err(Failure::Lost)?;
                let read = read_all(&channel, queue, decode).await;
                close(&channel).await;
                read
            })
            .await
    }
}

/// Declare [`LEADER_QUEUE`] and consume it, prefetch 1, unacked, on a channel of its own.
async fn sit(session: &Session) -> Result<Sitting, Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut arguments = FieldTable::default();
    arguments.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    let seated = async {
        channel
            .queue_declare(LEADER_QUEUE.into(), options, arguments)
            .await?;
        channel.basic_qos(1, BasicQosOptions::default()).await?;
        channel
            .basic_consume(
                LEADER_QUEUE.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
    }
    .await;
    match seated {
        Ok(consumer) => Ok(Sitting {
            generation: session.generation,
            channel,
            consumer,
            token: None,
        }),
        Err(error) => {
            close(&channel).await;
            Err(Failure::classify(LEADER_QUEUE, error))
        }
    }
}

/// Take the token if the broker delivered it since; false when the consumer ended (its
/// channel or connection went), so the seat is taken again.
fn take_token(sitting: &mut Sitting) -> bool {
    while let Some(next) = sitting.consumer.next().now_or_never() {
        match next {
            Some(Ok(delivery)) if sitting.token.is_none() => {
                sitting.token = Some((delivery.acker, Instant::now()));
            }
            // Prefetch 1 delivers no second token while one is held.
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return false,
        }
    }
    true
}

/// Publish a token unless one is ready already (the queue takes at most one ready; the
/// broker refuses the rest, which is as it should be).
async fn offer_token(session: &Session) {
    let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
    if let Err(error) = session.publish(LEADER_QUEUE, b"leader", properties).await {
        tracing::trace!(?error, "no token offered: one is ready already");
    }
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}

/// Up to [`HISTORY`] firings at the head of `queue`, left unacked for the channel's close
/// to hand back; what is not a firing is skipped.
async fn read_all<T>(
    channel: &Channel,
    queue: &str,
    decode: fn(&[u8]) -> Option<T>,
) -> Result<Vec<T>, Failure> {
    let mut records = Vec::new();
    for _ in 0..HISTORY {
        let got = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(|error| Failure::classify(queue, error))?;
        let Some(message) = got else { break };
        match decode(&message.delivery.data) {
            Some(record) => records.push(record),
            None => tracing::warn!(
                queue,
                bytes = message.delivery.data.len(),
                "skipping a message that is not a schedule's record"
            ),
        }
    }
    Ok(records)
}

async fn declare_history(session: &Session, queue: &str) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut arguments = FieldTable::default();
    let history = i64::try_from(HISTORY).unwrap_or(i64::MAX);
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(history));
    let declared = channel
        .queue_declare(queue.into(), options, arguments)
        .await
        .map(|_| ())
        .map_err(|error| Failure::classify(queue, error));
    close(&channel).await;
    declared
}

/// Close a channel of our own, best effort: closing hands back anything taken and not
/// settled.
async fn close(channel: &Channel) {
    if channel.status().connected() {
        let _ = channel.close(200, "schedule done".into()).await;
    }
}
