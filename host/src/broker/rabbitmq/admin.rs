//! What an operator does with dead letters: look at them, drop them, or replay them.
//! Inherent methods, not part of the [`Backend`](crate::broker::Backend) seam, because
//! only the CLI needs them.

use std::sync::Arc;

use lapin::Channel;
use lapin::message::Delivery as AmqpDelivery;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use uuid::Uuid;

use super::RabbitMqBackend;
use super::codec::{
    HEADER_ATTEMPTS, HEADER_DEATH_REASON, HEADER_ORIGINAL_QUEUE, job_properties, string_header,
    trace_context, u32_header,
};
use super::session::{Failure, Session};
use crate::broker::hold::check_queue_name;
use crate::broker::{BrokerError, dead_letter_queue_name};
use crate::envelope::Envelope;

/// A message in a dead-letter queue, as [`RabbitMqBackend::dead_letters`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitMqDeadLetter {
    /// The body, byte for byte as it was dead-lettered.
    pub body: Vec<u8>,
    /// `x-death-reason`, when the message carries it.
    pub reason: Option<String>,
    /// `x-original-queue`, when the message carries it.
    pub original_queue: Option<String>,
    /// `x-attempts`, when the message carries it.
    pub attempts: Option<u32>,
}

/// What [`RabbitMqBackend::replay_dead_letters`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replayed {
    /// Envelopes put back on the work queue as a first attempt.
    pub replayed: u32,
    /// Bodies that are not envelopes, left in the dead-letter queue.
    pub skipped: u32,
}

impl RabbitMqBackend {
    /// Up to `limit` dead letters of `queue`, oldest first, leaving them in place.
    ///
    /// They are taken unacked and handed back together, so the queue keeps its order.
    pub async fn dead_letters(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<RabbitMqDeadLetter>, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let channel = self.admin_channel(queue).await?;
        let mut letters = Vec::new();
        let mut last_tag = None;
        while letters.len() < limit {
            let Some(message) = get(&channel, &dead).await? else {
                break;
            };
            last_tag = Some(message.delivery_tag);
            letters.push(RabbitMqDeadLetter {
                reason: string_header(&message.properties, HEADER_DEATH_REASON),
                original_queue: string_header(&message.properties, HEADER_ORIGINAL_QUEUE),
                attempts: u32_header(&message.properties, HEADER_ATTEMPTS),
                body: message.data,
            });
        }
        if let Some(tag) = last_tag {
            hand_back(&channel, tag).await?;
        }
        Ok(letters)
    }

    /// Drop every dead letter of `queue`; returns how many there were.
    pub async fn purge_dead_letters(&self, queue: &str) -> Result<u32, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let channel = self.admin_channel(queue).await?;
        channel
            .queue_purge(dead.as_str().into(), QueuePurgeOptions::default())
            .await
            .map_err(|error| failed(Failure::classify(&dead, error)))
    }

    /// Move the dead letters of `queue` back onto it as first attempts with their job
    /// ids and trace contexts (`traceparent`), each one confirmed on `queue` before it leaves the dead-letter queue.
    /// Bodies that are not envelopes stay where they are.
    ///
    /// Only the letters present when the replay starts are considered. A connection
    /// lost halfway fails the replay; what was moved stays moved, and a letter caught
    /// between its publish and its ack may be replayed twice.
    pub async fn replay_dead_letters(&self, queue: &str) -> Result<Replayed, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let session = self.admin_session(queue).await?;
        let channel = session.channel().await.map_err(lost)?;
        let present = present(&channel, &dead).await?;
        let mut outcome = Replayed::default();
        let mut skipped = Vec::new();
        for _ in 0..present {
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
                    message
                        .acker
                        .ack(BasicAckOptions::default())
                        .await
                        .map_err(lost)?;
                    outcome.replayed += 1;
                }
                // Held unacked until the end, so the next get moves past it.
                Err(_) => skipped.push(message),
            }
        }
        for message in skipped {
            let back = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            message.acker.nack(back).await.map_err(lost)?;
            outcome.skipped += 1;
        }
        Ok(outcome)
    }

    /// Take the dead letter of `queue` whose job id is `job_id` out of `{queue}.dead`:
    /// replayed onto `queue` as a first attempt (confirmed before it leaves) when
    /// `replay`, dropped otherwise. Returns whether it was there; the other letters stay
    /// in their order.
    pub async fn take_dead_letter(
        &self,
        queue: &str,
        job_id: Uuid,
        replay_it: bool,
    ) -> Result<bool, BrokerError> {
        let dead = dead_letter_queue_name(queue);
        let session = self.admin_session(queue).await?;
        let channel = session.channel().await.map_err(lost)?;
        let present = present(&channel, &dead).await?;
        let mut passed = None;
        let mut found = false;
        for _ in 0..present {
            let Some(message) = get(&channel, &dead).await? else {
                break;
            };
            match Envelope::decode(&message.data) {
                Ok(envelope) if envelope.job_id == job_id => {
                    if replay_it {
                        replay(&session, queue, envelope).await?;
                    }
                    let ack = BasicAckOptions::default();
                    message.acker.ack(ack).await.map_err(lost)?;
                    found = true;
                    break;
                }
                // Held unacked until the end, so the next get moves past it.
                _ => passed = Some(message.delivery_tag),
            }
        }
        if let Some(tag) = passed {
            hand_back(&channel, tag).await?;
        }
        Ok(found)
    }

    /// The current session, waiting out an outage like a publish does. Each helper
    /// works on a channel of its own, so whatever it took unacked goes back to the
    /// queue when the channel closes, whatever happens.
    pub(super) async fn admin_session(&self, queue: &str) -> Result<Arc<Session>, BrokerError> {
        check_queue_name(queue)?;
        self.link.run(|session| async move { Ok(session) }).await
    }

    /// A channel of its own on the current session, for a helper that only reads or purges.
    async fn admin_channel(&self, queue: &str) -> Result<Channel, BrokerError> {
        self.admin_session(queue)
            .await?
            .channel()
            .await
            .map_err(lost)
    }
}

async fn replay(
    session: &Arc<Session>,
    queue: &str,
    envelope: Envelope,
) -> Result<(), BrokerError> {
    let envelope = Envelope {
        queue: queue.to_owned(),
        attempt: 1,
        priority: 0,
        ..envelope
    };
    session
        .publish(queue, &envelope.encode(), job_properties(&envelope))
        .await
        .map_err(failed)
}

/// Hand back every message taken on `channel` up to `tag`, in their order.
async fn hand_back(channel: &Channel, tag: u64) -> Result<(), BrokerError> {
    let all_back = BasicNackOptions {
        multiple: true,
        requeue: true,
    };
    channel.basic_nack(tag, all_back).await.map_err(lost)
}

/// How many messages `queue` holds now.
async fn present(channel: &Channel, queue: &str) -> Result<u32, BrokerError> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .map_err(|error| failed(Failure::classify(queue, error)))?;
    Ok(declared.message_count())
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
