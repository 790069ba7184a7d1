//! [`Recordings`] on RabbitMQ: the durable queue [`RECORDINGS_QUEUE`], one persistent
//! message per recording, its `message-id` the job's id, so a lookup decodes only the
//! job's own. The queue's arguments are the retention: `x-max-length`,
//! `x-max-length-bytes` (the oldest dropped first) and `x-message-ttl`.
//!
//! A lookup takes up to [`RECORDINGS_KEPT`] messages with `basic.get`, unacked, on a
//! channel of its own, and closes the channel, which hands them all back in their order.
//! Each message is read whole (AMQP has no partial get), one at a time, so a hostile one
//! costs at most the broker's `max_message_size` for as long as it is looked at; only the
//! asked jobs' own are offered to the [`Lookup`], which bounds what is kept.

use std::sync::atomic::{AtomicBool, Ordering};

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::RabbitMqBackend;
use super::session::{Failure, Session};
use crate::broker::BrokerError;
use crate::broker::recordings::{
    KeptRecording, Lookup, RECORDINGS_KEPT, RECORDINGS_MAX_BYTES, RECORDINGS_QUEUE, RECORDINGS_TTL,
    Recordings,
};
use crate::job::Recording;

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

impl Recordings for RabbitMqBackend {
    async fn keep_recording(&self, recording: &KeptRecording) -> Result<(), BrokerError> {
        let id = ShortString::from(recording.job_id.to_string());
        self.link
            .run(|session| {
                let (body, id) = (&recording.json, id.clone());
                async move {
                    declare(&session).await?;
                    let properties = BasicProperties::default()
                        .with_delivery_mode(PERSISTENT)
                        .with_message_id(id)
                        .with_content_type("application/json".into());
                    session.publish(RECORDINGS_QUEUE, body, properties).await
                }
            })
            .await
    }

    async fn recordings_of(&self, job_ids: &[Uuid]) -> Result<Vec<Recording>, BrokerError> {
        self.link
            .run(|session| async move {
                declare(&session).await?;
                let channel = session.channel().await.map_err(Failure::Lost)?;
                let found = find(&channel, job_ids).await;
                if channel.status().connected() {
                    let _ = channel.close(200, "recordings read".into()).await;
                }
                found
            })
            .await
    }
}

/// The recordings of `job_ids` among the first [`RECORDINGS_KEPT`] messages, left unacked
/// for the channel's close to hand back.
async fn find(channel: &Channel, job_ids: &[Uuid]) -> Result<Vec<Recording>, Failure> {
    let mut lookup = Lookup::new(job_ids);
    for _ in 0..RECORDINGS_KEPT {
        let got = channel
            .basic_get(RECORDINGS_QUEUE.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(|error| Failure::classify(RECORDINGS_QUEUE, error))?;
        let Some(message) = got else { break };
        let delivery = message.delivery;
        let id = delivery.properties.message_id().as_ref();
        if id.is_some_and(|id| lookup.asks_for(id.as_str())) {
            lookup.offer(&delivery.data);
        }
    }
    Ok(lookup.finish())
}

/// Declare [`RECORDINGS_QUEUE`] with the retention as its arguments. A queue of that name
/// someone declared otherwise is used as it is, with a warning: its retention is then not
/// the host's, but recordings still work.
async fn declare(session: &Session) -> Result<(), Failure> {
    match declare_with(session, false).await {
        Err(Failure::Final(refused)) => match declare_with(session, true).await {
            Ok(()) => {
                // Once per process: it is declared before every recording.
                static WARNED: AtomicBool = AtomicBool::new(false);
                if WARNED.swap(true, Ordering::Relaxed) {
                    return Ok(());
                }
                tracing::warn!(
                    queue = RECORDINGS_QUEUE,
                    %refused,
                    "the recordings queue exists with other arguments: the host uses it as it is,                      and the retention is what that queue keeps"
                );
                Ok(())
            }
            Err(_) => Err(Failure::Final(refused)),
        },
        declared => declared,
    }
}

async fn declare_with(session: &Session, passive: bool) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let options = QueueDeclareOptions {
        durable: true,
        passive,
        ..QueueDeclareOptions::default()
    };
    let number = |n: u128| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), number(RECORDINGS_KEPT as u128));
    arguments.insert(
        "x-max-length-bytes".into(),
        number(RECORDINGS_MAX_BYTES as u128),
    );
    arguments.insert("x-message-ttl".into(), number(RECORDINGS_TTL.as_millis()));
    let declared = channel
        .queue_declare(RECORDINGS_QUEUE.into(), options, arguments)
        .await
        .map(|_| ())
        .map_err(|error| Failure::classify(RECORDINGS_QUEUE, error));
    if channel.status().connected() {
        let _ = channel.close(200, "declared".into()).await;
    }
    declared
}
