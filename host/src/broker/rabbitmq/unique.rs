//! Unique locks on RabbitMQ: one classic queue per lock that holds at most one message,
//! the holder's job id.
//!
//! The lock queue (named by [`UniqueLock::name`]) is declared durable with
//! `x-max-length = 1`, `x-overflow = reject-publish`, `x-message-ttl = for` and an
//! `x-expires` a second above it, so:
//! - **taking** is a declaration and a persistent, mandatory, confirmed publish of the job
//!   id. The broker confirms it when the queue was empty; it nacks it when a message
//!   holds the lock, and the holder is then read with `basic.get` and handed back
//!   (`basic.nack` with requeue) unchanged. A holder that is this job (its first take
//!   was confirmed, the confirm lost in a reconnect) is ours; a head that is not a job
//!   id (a stranger's publish) is dropped, because it would only keep the key from every
//!   job for `for`, and the take is tried again, as it is when the holder was gone by
//!   the time it was read (released in between), [`TRIES`] times in all;
//! - **releasing** takes the head with `basic.get`, acks it when it names the job and
//!   hands it back otherwise, then deletes the queue if it is empty, so lock queues do
//!   not pile up; a take racing the deletion sees its publish returned and tries again;
//! - the broker **ends** a lock by itself `for` after it was taken (the message's TTL);
//!   an idle, empty lock queue is deleted a second later (`x-expires`).
//!
//! The queue is durable and the message persistent, so a lock survives a broker restart
//! (its TTL runs on). It is a classic queue, on the node that declared it first: while
//! that node is down, enqueues of that key fail (the declaration is refused) rather than
//! take the key twice. A quorum queue would survive that too, at the cost of a Raft group
//! per key.

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::link::Link;
use super::session::{Failure, Session};
use crate::broker::{BrokerError, Taken, UniqueLock};

/// How often a take is sent before it gives up: the holder can be released, or a stranger's
/// message dropped, between the nack and the read.
const TRIES: usize = 3;

/// How much longer than its lock an idle lock queue lives, so the queue never expires
/// under a message that still holds the lock.
const EXPIRES_GRACE_MS: u64 = 1_000;

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// What the head of a lock queue is.
enum Head {
    /// A job holds the lock.
    Job(Uuid),
    /// Something that is not a job id, now dropped.
    Dropped,
}

/// Take `lock` for `job_id` (see the [module doc](self)).
pub(super) async fn take(
    link: &Link,
    lock: &UniqueLock,
    job_id: Uuid,
) -> Result<Taken, BrokerError> {
    let body = job_id.to_string().into_bytes();
    let body = &body;
    let mut last = None;
    for _ in 0..TRIES {
        link.run(|session| async move { declare(&session, lock).await })
            .await?;
        let published = link
            .run(|session| async move {
                let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
                session.publish(lock.name(), body, properties).await
            })
            .await;
        let error = match published {
            Ok(()) => return Ok(Taken::Ours),
            // Deleted by a release between the declaration and the publish.
            Err(error @ BrokerError::Unroutable { .. }) => error,
            // Full: something holds the lock.
            Err(error @ BrokerError::NotConfirmed { .. }) => {
                match link
                    .run(|session| async move { head(&session, lock).await })
                    .await?
                {
                    Some(Head::Job(holder)) if holder == job_id => return Ok(Taken::Ours),
                    Some(Head::Job(holder)) => return Ok(Taken::HeldBy(Some(holder))),
                    Some(Head::Dropped) | None => error,
                }
            }
            Err(error) => return Err(error),
        };
        last = Some(error);
    }
    Err(last.expect("every try that does not return sets it"))
}

/// Let go of `lock` if `job_id` holds it (see the [module doc](self)).
pub(super) async fn release(
    link: &Link,
    lock: &UniqueLock,
    job_id: Uuid,
) -> Result<(), BrokerError> {
    link.run(|session| async move {
        let channel = session.channel().await.map_err(Failure::Lost)?;
        let released = release_on(&channel, lock, job_id).await;
        close(&channel).await;
        released
    })
    .await
}

async fn release_on(channel: &Channel, lock: &UniqueLock, job_id: Uuid) -> Result<(), Failure> {
    let taken = match get(channel, lock).await {
        Ok(Some(taken)) => taken,
        // Empty, or gone (`NOT_FOUND`): the lock ended already.
        Ok(None) | Err(Failure::Final(_)) => return Ok(()),
        Err(lost) => return Err(lost),
    };
    let head = taken.delivery;
    if job_id_of(&head.data) != Some(job_id) {
        head.acker.nack(requeue()).await.map_err(Failure::Lost)?;
        return Ok(());
    }
    head.acker
        .ack(BasicAckOptions::default())
        .await
        .map_err(Failure::Lost)?;
    // Refused when a take got in since the ack, which is as it should be: that take holds
    // the queue now.
    let delete = QueueDeleteOptions {
        if_empty: true,
        ..QueueDeleteOptions::default()
    };
    if let Err(error) = channel.queue_delete(lock.name().into(), delete).await {
        tracing::debug!(%error, "a released lock queue was not deleted");
    }
    Ok(())
}

/// The head of `lock`'s queue, handed back if it is a job id and dropped if not.
async fn head(session: &Session, lock: &UniqueLock) -> Result<Option<Head>, Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let head = read_head(&channel, lock).await;
    close(&channel).await;
    head
}

async fn read_head(channel: &Channel, lock: &UniqueLock) -> Result<Option<Head>, Failure> {
    let taken = match get(channel, lock).await {
        Ok(Some(taken)) => taken.delivery,
        // Gone (`NOT_FOUND`): released and deleted since the nack.
        Ok(None) | Err(Failure::Final(_)) => return Ok(None),
        Err(lost) => return Err(lost),
    };
    match job_id_of(&taken.data) {
        Some(holder) => {
            taken.acker.nack(requeue()).await.map_err(Failure::Lost)?;
            Ok(Some(Head::Job(holder)))
        }
        None => {
            tracing::warn!(
                lock = lock.name(),
                bytes = taken.data.len(),
                "dropping a message that is not a job id from a unique lock queue"
            );
            taken
                .acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(Failure::Lost)?;
            Ok(Some(Head::Dropped))
        }
    }
}

async fn get(
    channel: &Channel,
    lock: &UniqueLock,
) -> Result<Option<lapin::message::BasicGetMessage>, Failure> {
    channel
        .basic_get(lock.name().into(), BasicGetOptions { no_ack: false })
        .await
        .map_err(|error| Failure::classify(lock.name(), error))
}

async fn declare(session: &Session, lock: &UniqueLock) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(lock.name().into(), options, arguments(lock))
        .await
        .map_err(|error| Failure::classify(lock.name(), error));
    close(&channel).await;
    declared.map(|_| ())
}

/// The lock queue's arguments: one message at most, a publish beyond it nacked, the
/// message gone `for` after it came, the idle queue a little later.
fn arguments(lock: &UniqueLock) -> FieldTable {
    let for_ms = u64::try_from(lock.lasts().as_millis()).unwrap_or(u64::MAX);
    let millis = |ms: u64| AMQPValue::LongLongInt(i64::try_from(ms).unwrap_or(i64::MAX));
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    arguments.insert("x-message-ttl".into(), millis(for_ms));
    arguments.insert(
        "x-expires".into(),
        millis(for_ms.saturating_add(EXPIRES_GRACE_MS)),
    );
    arguments
}

/// The job id a lock message names: its body, a UUID in text, and nothing else.
fn job_id_of(body: &[u8]) -> Option<Uuid> {
    std::str::from_utf8(body).ok()?.parse().ok()
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}

/// Close a channel of our own, best effort: closing hands back anything taken and not
/// settled, should a step have failed.
async fn close(channel: &Channel) {
    if channel.status().connected() {
        let _ = channel.close(200, "unique lock done".into()).await;
    }
}
