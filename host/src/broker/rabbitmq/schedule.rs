//! [`Schedules`] on RabbitMQ: the lead is the exclusive queue [`LEADER_QUEUE`], and each
//! schedule's last firings a durable queue of [`HISTORY`] persistent messages.
//!
//! - **Leading** is a declaration of [`LEADER_QUEUE`], exclusive and auto-deleted. The
//!   broker lets one connection declare it; another connection's declaration is refused
//!   (`RESOURCE_LOCKED`) and answers "not leading". Declaring it again on the holding
//!   connection succeeds, so the same call both takes and keeps the lead. The queue dies
//!   with its connection: a killed host, a lost network, a broker restart end the lead,
//!   and the next scheduler to ask takes it.
//! - **Recording** declares [`history_queue_name`] (durable, `x-max-length` = [`HISTORY`],
//!   dropping the oldest) and publishes the firing there, persistent and confirmed.
//! - **Reading** takes up to [`HISTORY`] messages from that queue with `basic.get`, unacked,
//!   on a channel of its own, and closes the channel, which hands them all back in their
//!   order. A reader racing another sees fewer firings for that round trip; a scheduler
//!   reads once when it takes the lead, and the per-tick lock covers what it misses.

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::RabbitMqBackend;
use super::session::{Failure, Session};
use crate::broker::BrokerError;
use crate::broker::schedule::{Firing, HISTORY, LEADER_QUEUE, Schedules, history_queue_name};

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

impl Schedules for RabbitMqBackend {
    async fn lead(&self, _candidate: Uuid) -> Result<bool, BrokerError> {
        // The connection is the candidate: the broker knows no other identity.
        self.link
            .run(|session| async move {
                let channel = session.channel().await.map_err(Failure::Lost)?;
                let options = QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                };
                let declared = channel
                    .queue_declare(LEADER_QUEUE.into(), options, FieldTable::default())
                    .await;
                close(&channel).await;
                match declared {
                    Ok(_) => Ok(true),
                    Err(error) => match Failure::classify(LEADER_QUEUE, error) {
                        // RESOURCE_LOCKED: another connection holds it.
                        Failure::Final(_) => Ok(false),
                        lost => Err(lost),
                    },
                }
            })
            .await
    }

    async fn resign(&self, _candidate: Uuid) {
        let Ok(session) = self.link.session().await else {
            return;
        };
        let Ok(channel) = session.channel().await else {
            return;
        };
        // Refused when another connection holds it, which is as it should be.
        if let Err(error) = channel
            .queue_delete(LEADER_QUEUE.into(), QueueDeleteOptions::default())
            .await
        {
            tracing::debug!(%error, "the scheduler's lead was not given up: another host holds it");
        }
        close(&channel).await;
    }

    async fn record(&self, schedule: &str, firing: &Firing) -> Result<(), BrokerError> {
        let queue = &history_queue_name(schedule);
        let body = &firing.encode();
        self.link
            .run(|session| async move {
                declare_history(&session, queue).await?;
                let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
                session.publish(queue, body, properties).await
            })
            .await
    }

    async fn firings(&self, schedule: &str) -> Result<Vec<Firing>, BrokerError> {
        let queue = &history_queue_name(schedule);
        self.link
            .run(|session| async move {
                declare_history(&session, queue).await?;
                let channel = session.channel().await.map_err(Failure::Lost)?;
                let read = read_all(&channel, queue).await;
                close(&channel).await;
                read
            })
            .await
    }
}

/// Up to [`HISTORY`] firings at the head of `queue`, left unacked for the channel's close
/// to hand back; what is not a firing is skipped.
async fn read_all(channel: &Channel, queue: &str) -> Result<Vec<Firing>, Failure> {
    let mut firings = Vec::new();
    for _ in 0..HISTORY {
        let got = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(|error| Failure::classify(queue, error))?;
        let Some(message) = got else { break };
        match Firing::decode(&message.delivery.data) {
            Some(firing) => firings.push(firing),
            None => tracing::warn!(
                queue,
                bytes = message.delivery.data.len(),
                "skipping a message that is not a schedule's firing"
            ),
        }
    }
    Ok(firings)
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
