//! [`Recordings`] on RabbitMQ: the durable queue [`RECORDINGS_QUEUE`], one persistent
//! message per recording, its `message-id` the job's id, so a lookup decodes only the
//! job's own. The queue's arguments are the retention: `x-max-length`,
//! `x-max-length-bytes` (the oldest dropped first) and `x-message-ttl`.
//!
//! A lookup takes up to [`RECORDINGS_KEPT`] messages with `basic.get`, unacked, on a
//! channel of its own, and closes the channel, which hands them all back in their order.

use std::sync::atomic::{AtomicBool, Ordering};

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::RabbitMqBackend;
use super::session::{Failure, Session};
use crate::broker::BrokerError;
use crate::broker::recordings::{
    RECORDINGS_KEPT, RECORDINGS_MAX_BYTES, RECORDINGS_QUEUE, RECORDINGS_TTL, Recordings,
};
use crate::job::Recording;

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

impl Recordings for RabbitMqBackend {
    async fn keep_recording(&self, recording: &Recording) -> Result<(), BrokerError> {
        let body = serde_json::to_vec(recording)
            .map_err(|error| BrokerError::Connection(format!("a recording as JSON: {error}")))?;
        let id = ShortString::from(recording.job.job_id.to_string());
        self.link
            .run(|session| {
                let (body, id) = (&body, id.clone());
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
/// for the channel's close to hand back; a message that is not a recording is skipped.
async fn find(channel: &Channel, job_ids: &[Uuid]) -> Result<Vec<Recording>, Failure> {
    let wanted: Vec<String> = job_ids.iter().map(Uuid::to_string).collect();
    let mut found = Vec::new();
    for _ in 0..RECORDINGS_KEPT {
        let got = channel
            .basic_get(RECORDINGS_QUEUE.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(|error| Failure::classify(RECORDINGS_QUEUE, error))?;
        let Some(message) = got else { break };
        let delivery = message.delivery;
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(ShortString::as_str);
        if !id.is_some_and(|id| wanted.iter().any(|wanted| wanted == id)) {
            continue;
        }
        match serde_json::from_slice::<Recording>(&delivery.data) {
            Ok(recording) if job_ids.contains(&recording.job.job_id) => found.push(recording),
            _ => tracing::warn!(
                queue = RECORDINGS_QUEUE,
                bytes = delivery.data.len(),
                "skipping a message that is not a recording"
            ),
        }
    }
    Ok(found)
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
