//! Unique locks on RabbitMQ: a classic queue per lock that holds at most one message, and
//! a second queue beside it that says who holds it.
//!
//! The lock queue (named by [`UniqueLock::name`]) is declared durable with
//! `x-max-length = 1`, `x-overflow = reject-publish`, `x-message-ttl = for` and an
//! `x-expires` a second above it. Its holder queue, `{lock}.holder`, is declared alike,
//! except that a publish beyond its one message drops the older one (`drop-head`).
//! - **Taking** is a declaration of both and a persistent, mandatory, confirmed publish
//!   of the job id to the lock queue. The broker confirms it when the queue was empty and
//!   nacks it when a message holds the lock. The winner then publishes its id to the
//!   holder queue, and a loser reads the holder there with `basic.get` and hands it back
//!   (`basic.nack` with requeue).
//! - The lock queue itself is never read to learn its holder, because RabbitMQ counts only
//!   *ready* messages against `x-max-length`: while a reader held the lock message
//!   unacked, a second publish would be confirmed and two jobs would hold the lock (the
//!   race test showed four). Reading the holder queue can only make an answer stale.
//! - When the holder cannot be read (not yet recorded by a winner that raced this take,
//!   or a stranger's message there, which is dropped), it is read again a few times over
//!   about 0.6 s ([`HOLDER_PAUSES`]) while the lock queue holds a message; then the answer is a
//!   duplicate without an id. When the lock queue turns out empty (released in between),
//!   the take is tried again, [`TRIES`] times in all.
//! - **Releasing** takes the lock queue's head with `basic.get` and acks it when it names
//!   the job, hands it back otherwise; does the same with the holder queue; then deletes
//!   both if they are empty, so lock queues do not pile up. A take racing the deletion
//!   sees its publish returned and tries again.
//! - The broker **ends** a lock by itself `for` after it was taken (the message's TTL);
//!   idle, empty queues are deleted a second later (`x-expires`).
//!
//! Known limits, each needing a rare coincidence: a release whose job's lock had already
//! ended by its TTL and been taken by another job hands that job's message back, and an
//! enqueue landing in that round trip is accepted too; a take whose confirm was lost in a
//! reconnect and sent again is answered as a duplicate of an unknown job, and keeps the
//! key unused until `for` ends; an id read in a race with a release may be the previous
//! holder's.
//!
//! The queues are durable and the messages persistent, so a lock survives a broker
//! restart (its TTL runs on). They are classic queues, on the node that declared them
//! first: while that node is down, enqueues of that key fail (the declaration is refused)
//! rather than take the key twice. Quorum queues would survive that too, at the cost of a
//! Raft group per key.

use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};
use rand::Rng;
use uuid::Uuid;

use super::link::Link;
use super::session::{Failure, Session};
use crate::broker::{BrokerError, Taken, UniqueLock};

/// How often a take is sent before it gives up: the holder can release between the nack
/// and the read.
const TRIES: usize = 3;

/// The pauses before each read of a holder queue that a take's loser finds empty, each
/// jittered by half either way: the winner records itself a round trip after its own
/// confirm, and a read takes the holder's message out of the queue for a round trip, so
/// enqueues racing each other spread their reads out, over about 0.6 s in all, before
/// they answer a duplicate without an id.
const HOLDER_PAUSES: [Duration; 7] = [
    Duration::ZERO,
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
    Duration::from_millis(300),
];

/// How much longer than its lock an idle lock queue lives, so the queue never expires
/// under a message that still holds the lock.
const EXPIRES_GRACE_MS: u64 = 1_000;

/// AMQP `delivery-mode` of a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// Take `lock` for `job_id` (see the [module doc](self)).
pub(super) async fn take(
    link: &Link,
    lock: &UniqueLock,
    job_id: Uuid,
) -> Result<Taken, BrokerError> {
    let body = job_id.to_string().into_bytes();
    let (body, holder) = (&body, &holder_queue(lock));
    let mut last = None;
    for _ in 0..TRIES {
        link.run(|session| async move { declare(&session, lock, holder).await })
            .await?;
        let error = match publish(link, lock.name(), body).await {
            Ok(()) => {
                if let Err(error) = publish(link, holder, body).await {
                    tracing::debug!(%error, "the holder of a unique lock was not recorded; duplicates are refused without its id");
                }
                return Ok(Taken::Ours);
            }
            // Deleted by a release between the declaration and the publish.
            Err(error @ BrokerError::Unroutable { .. }) => error,
            // Full: something holds the lock.
            Err(error @ BrokerError::NotConfirmed { .. }) => {
                match holder_of(link, lock, holder, job_id).await? {
                    Some(taken) => return Ok(taken),
                    None => error,
                }
            }
            Err(error) => return Err(error),
        };
        last = Some(error);
    }
    Err(last.expect("every try that does not return sets it"))
}

/// Who holds `lock`, whose take was just nacked: the holder queue's job id, read again
/// after [`HOLDER_PAUSES`] while the lock is held and the winner may not have recorded
/// itself yet; `None` when the lock queue turns out empty (released since the nack), so
/// the take is tried again.
async fn holder_of(
    link: &Link,
    lock: &UniqueLock,
    holder: &str,
    job_id: Uuid,
) -> Result<Option<Taken>, BrokerError> {
    for pause in HOLDER_PAUSES {
        let jittered = pause.mul_f64(rand::rng().random_range(0.5..1.5));
        tokio::time::sleep(jittered).await;
        let read = link
            .run(|session| async move { read_holder(&session, holder).await })
            .await?;
        match read {
            Some(id) if id == job_id => return Ok(Some(Taken::Ours)),
            Some(id) => return Ok(Some(Taken::HeldBy(Some(id)))),
            None => {}
        }
        let held = link
            .run(|session| async move { Ok(session.messages_in(lock.name()).await?.unwrap_or(0)) })
            .await?;
        if held == 0 {
            return Ok(None);
        }
    }
    Ok(Some(Taken::HeldBy(None)))
}

/// Let go of `lock` if `job_id` holds it (see the [module doc](self)).
pub(super) async fn release(
    link: &Link,
    lock: &UniqueLock,
    job_id: Uuid,
) -> Result<(), BrokerError> {
    let holder = &holder_queue(lock);
    link.run(|session| async move {
        let channel = session.channel().await.map_err(Failure::Lost)?;
        let released = async {
            let ours = take_if_ours(&channel, lock.name(), job_id).await?;
            take_if_ours(&channel, holder, job_id).await?;
            Ok(ours)
        }
        .await;
        close(&channel).await;
        if released? {
            // On channels of their own, because a refused deletion closes its channel.
            for queue in [lock.name(), holder.as_str()] {
                delete_if_empty(&session, queue).await;
            }
        }
        Ok(())
    })
    .await
}

/// Ack the head of `queue` if it names `job_id` (or names no job), hand it back if it
/// names another; whether it named `job_id`.
async fn take_if_ours(channel: &Channel, queue: &str, job_id: Uuid) -> Result<bool, Failure> {
    let Some(head) = get(channel, queue).await? else {
        return Ok(false);
    };
    let named = job_id_of(&head.data);
    if named.is_some_and(|id| id != job_id) {
        head.acker.nack(requeue()).await.map_err(Failure::Lost)?;
    } else {
        head.acker
            .ack(BasicAckOptions::default())
            .await
            .map_err(Failure::Lost)?;
    }
    Ok(named == Some(job_id))
}

/// The job id in `holder`'s head, handed back; a head that is not a job id is dropped.
async fn read_holder(session: &Session, holder: &str) -> Result<Option<Uuid>, Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let read = async {
        let Some(head) = get(&channel, holder).await? else {
            return Ok(None);
        };
        let id = job_id_of(&head.data);
        if id.is_some() {
            head.acker.nack(requeue()).await.map_err(Failure::Lost)?;
        } else {
            tracing::warn!(
                queue = holder,
                bytes = head.data.len(),
                "dropping a message that is not a job id from a unique lock's holder queue"
            );
            head.acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(Failure::Lost)?;
        }
        Ok(id)
    }
    .await;
    close(&channel).await;
    read
}

/// The head of `queue`, unacked; `None` when it is empty or gone (`NOT_FOUND`: the lock
/// ended, its queue expired or was deleted).
async fn get(channel: &Channel, queue: &str) -> Result<Option<lapin::message::Delivery>, Failure> {
    match channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
    {
        Ok(got) => Ok(got.map(|message| message.delivery)),
        Err(error) => match Failure::classify(queue, error) {
            Failure::Final(_) => Ok(None),
            lost => Err(lost),
        },
    }
}

async fn publish(link: &Link, queue: &str, body: &[u8]) -> Result<(), BrokerError> {
    link.run(|session| async move {
        let properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
        session.publish(queue, body, properties).await
    })
    .await
}

async fn declare(session: &Session, lock: &UniqueLock, holder: &str) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let declared = async {
        for (queue, overflow) in [(lock.name(), "reject-publish"), (holder, "drop-head")] {
            channel
                .queue_declare(queue.into(), options, arguments(lock, overflow))
                .await
                .map_err(|error| Failure::classify(queue, error))?;
        }
        Ok(())
    }
    .await;
    close(&channel).await;
    declared
}

async fn delete_if_empty(session: &Session, queue: &str) {
    let Ok(channel) = session.channel().await else {
        return;
    };
    let delete = QueueDeleteOptions {
        if_empty: true,
        ..QueueDeleteOptions::default()
    };
    // Refused when a take got in since the release, which is as it should be.
    if let Err(error) = channel.queue_delete(queue.into(), delete).await {
        tracing::debug!(%error, queue, "a released lock queue was not deleted");
    }
    close(&channel).await;
}

/// The queue that says who holds `lock`.
fn holder_queue(lock: &UniqueLock) -> String {
    format!("{}.holder", lock.name())
}

/// A lock queue's arguments: one message at most, `overflow` beyond it, the message
/// gone `for` after it came, the idle queue a little later.
fn arguments(lock: &UniqueLock, overflow: &str) -> FieldTable {
    let for_ms = u64::try_from(lock.lasts().as_millis()).unwrap_or(u64::MAX);
    let millis = |ms: u64| AMQPValue::LongLongInt(i64::try_from(ms).unwrap_or(i64::MAX));
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from(overflow)),
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
