//! [`DeadLetters`] on RabbitMQ. Every letter is read with `basic.get` on a channel of the
//! operation's own and settled before the next is read: published where it goes (its work
//! queue, or an exact copy at the tail of the dead-letter queue), confirmed, then acked.
//! Nothing is ever requeued; the module doc of [`DeadLetters`] says what that guarantees.

use std::sync::Arc;

use lapin::message::Delivery as AmqpDelivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueuePurgeOptions};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::RabbitMqBackend;
use super::codec::{job_properties, trace_context};
use super::session::{Failure, Session};
use crate::broker::dead::{DeadLetterView, Listing, first_attempt};
use crate::broker::hold::check_queue_name;
use crate::broker::{BrokerError, DeadLetterList, DeadLetters, Replayed, dead_letter_queue_name};
use crate::envelope::Envelope;
use crate::text::{REASON_MAX, bounded_bytes};

impl DeadLetters for RabbitMqBackend {
    async fn list_dead(&self, queue: &str, limit: usize) -> Result<DeadLetterList, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let session = self.admin_session(queue).await?;
        let channel = session.channel().await.map_err(lost)?;
        let present = present(&session, &dead).await?;
        let mut listing = Listing::new(u64::from(present));
        // Past the byte cap letters are still read up to the limit, so that a listing of
        // a queue of at most `limit` letters moves each of them once and keeps its order.
        for _ in 0..limit.min(usize::try_from(present).unwrap_or(usize::MAX)) {
            let Some(message) = get(&channel, &dead).await? else {
                break;
            };
            listing.add(|| DeadLetterView::new(&message.data, headers(&message.properties)));
            keep(&session, &dead, message).await?;
        }
        Ok(listing.finish())
    }

    async fn replay_dead(&self, queue: &str) -> Result<Replayed, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let session = self.admin_session(queue).await?;
        let channel = session.channel().await.map_err(lost)?;
        let mut outcome = Replayed::default();
        for _ in 0..present(&session, &dead).await? {
            let Some(message) = get(&channel, &dead).await? else {
                break;
            };
            match Envelope::decode(&message.data) {
                Ok(envelope) => {
                    let envelope = Envelope {
                        trace: trace_context(&message.properties),
                        ..envelope
                    };
                    replay(&session, queue, envelope).await?;
                    ack(message).await?;
                    outcome.replayed += 1;
                }
                Err(_) => {
                    keep(&session, &dead, message).await?;
                    outcome.skipped += 1;
                }
            }
        }
        Ok(outcome)
    }

    async fn purge_dead(&self, queue: &str) -> Result<u32, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let channel = self
            .admin_session(queue)
            .await?
            .channel()
            .await
            .map_err(lost)?;
        channel
            .queue_purge(dead.as_str().into(), QueuePurgeOptions::default())
            .await
            .map_err(|error| failed(Failure::classify(&dead, error)))
    }

    async fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay_it: bool,
    ) -> Result<bool, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let session = self.admin_session(queue).await?;
        let channel = session.channel().await.map_err(lost)?;
        for _ in 0..present(&session, &dead).await? {
            let Some(message) = get(&channel, &dead).await? else {
                break;
            };
            let envelope = match Envelope::decode(&message.data) {
                Ok(envelope) if envelope.job_id == job_id => envelope,
                _ => {
                    keep(&session, &dead, message).await?;
                    continue;
                }
            };
            if replay_it {
                let envelope = Envelope {
                    trace: trace_context(&message.properties),
                    ..envelope
                };
                replay(&session, queue, envelope).await?;
            }
            ack(message).await?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl RabbitMqBackend {
    /// The current session, waiting out an outage like a publish does. Each operation
    /// reads on a channel of its own, so a letter it took and has not settled goes back to
    /// the queue when the channel closes, whatever happens.
    pub(super) async fn admin_session(&self, queue: &str) -> Result<Arc<Session>, BrokerError> {
        check_queue_name(queue)?;
        self.link.run(|session| async move { Ok(session) }).await
    }
}

/// Settle `message`, read off `dead`, by keeping it there: an exact copy (body,
/// properties, headers) is published to the tail and confirmed, then the original acked.
async fn keep(
    session: &Arc<Session>,
    dead: &str,
    message: AmqpDelivery,
) -> Result<(), BrokerError> {
    session
        .publish(dead, &message.data, message.properties.clone())
        .await
        .map_err(failed)?;
    ack(message).await
}

async fn ack(message: AmqpDelivery) -> Result<(), BrokerError> {
    message
        .acker
        .ack(BasicAckOptions::default())
        .await
        .map_err(lost)?;
    Ok(())
}

async fn replay(
    session: &Arc<Session>,
    queue: &str,
    envelope: Envelope,
) -> Result<(), BrokerError> {
    let envelope = first_attempt(queue, envelope);
    session
        .publish(queue, &envelope.encode(), job_properties(&envelope))
        .await
        .map_err(failed)
}

/// The headers of a message by name, each value as text; a string is decoded only as far
/// as a listing shows it, and a table, array or byte array is shown by its size.
fn headers(properties: &BasicProperties) -> Vec<(String, String)> {
    let Some(table) = properties.headers().as_ref() else {
        return Vec::new();
    };
    table
        .inner()
        .iter()
        .map(|(name, value)| (name.to_string(), text(value)))
        .collect()
}

fn text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(value) => bounded_bytes(value.as_bytes(), REASON_MAX),
        AMQPValue::ShortString(value) => value.to_string(),
        AMQPValue::Boolean(value) => value.to_string(),
        AMQPValue::ShortShortInt(value) => value.to_string(),
        AMQPValue::ShortShortUInt(value) => value.to_string(),
        AMQPValue::ShortInt(value) => value.to_string(),
        AMQPValue::ShortUInt(value) => value.to_string(),
        AMQPValue::LongInt(value) => value.to_string(),
        AMQPValue::LongUInt(value) => value.to_string(),
        AMQPValue::LongLongInt(value) => value.to_string(),
        AMQPValue::Float(value) => value.to_string(),
        AMQPValue::Double(value) => value.to_string(),
        AMQPValue::Timestamp(value) => value.to_string(),
        AMQPValue::DecimalValue(value) => format!("{value:?}"),
        AMQPValue::FieldTable(table) => format!("(a table of {} entries)", table.inner().len()),
        AMQPValue::FieldArray(array) => format!("(an array of {} values)", array.as_slice().len()),
        AMQPValue::ByteArray(bytes) => format!("({} bytes)", bytes.len()),
        AMQPValue::Void => String::new(),
    }
}

/// How many messages `queue` holds now; none when it is gone.
pub(super) async fn present(session: &Session, queue: &str) -> Result<u32, BrokerError> {
    let present = session.messages_in(queue).await.map_err(failed)?;
    Ok(present.unwrap_or(0))
}

async fn get(channel: &Channel, queue: &str) -> Result<Option<AmqpDelivery>, BrokerError> {
    let message = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .map_err(|error| failed(Failure::classify(queue, error)))?;
    Ok(message.map(|message| message.delivery))
}

fn failed(failure: Failure) -> BrokerError {
    match failure {
        Failure::Final(error) => error,
        Failure::Lost(error) => lost(error),
    }
}

pub(super) fn lost(error: lapin::Error) -> BrokerError {
    BrokerError::Connection(error.to_string())
}
