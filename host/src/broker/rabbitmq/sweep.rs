//! The hold-queue sweeper: releases what a hold queue keeps past its delay.
//!
//! A hold queue should release each message onto its work queue when the message's TTL
//! runs out. RabbitMQ does not always do that. On 3.10, a quorum hold queue whose leader
//! had moved twice stopped expiring messages altogether (seen in the cluster scenario
//! here; rabbitmq-server#10718 reports the same). A classic queue without consumers can
//! expire late (rabbitmq-server#10692). A retry or a deferral must not wait for ever on
//! that, so every backend runs a sweeper.
//!
//! Contract:
//! - every [`hold_sweep_interval`](super::RabbitMqOptions::hold_sweep_interval), for each
//!   hold queue this backend published into, the sweeper takes the head with `basic.get`.
//!   A queue is swept, also when nothing is published into it any more, until it is gone,
//!   or until every sweep for longer than its delay plus [`OVERDUE_GRACE`] found it
//!   empty: a get finds a queue empty also while its head is out with another host's
//!   sweeper, or on its way back from this one's, and a message that comes back must
//!   still be swept;
//! - a head held for longer than its delay plus [`OVERDUE_GRACE`] is published to its work
//!   queue (mandatory, confirmed) and only then acked, so it may arrive twice but is never
//!   lost. The next head is looked at in the same way, up to [`MAX_RELEASED`] per queue
//!   and sweep;
//! - a head that is not overdue is handed back (`basic.nack` with requeue), which leaves it
//!   at the head with its expiry unchanged, and that queue's sweep ends. A hold queue is
//!   first in, first out with one TTL, so nothing behind the head is due sooner;
//! - how long a head has been held comes from its `timestamp`, which the backend stamps on
//!   every message it holds. A head without one (queuey's), or with one in the future,
//!   counts as held since this sweeper first saw it at the head;
//! - the grace is far above the broker's own lateness, so a healthy hold queue releases
//!   everything itself and a sweep costs one get and one nack per queue. Hosts' clocks
//!   should agree to within the grace, or a message may be released early by the
//!   difference;
//! - a failure (connection lost, queue gone, a publish refused) ends that queue's sweep,
//!   and so does the backend's outage timeout. A head taken and not yet acked goes back to
//!   the queue, and the next sweep tries again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions};
use lapin::{BasicProperties, Channel};

use super::holds::{Found, Hold, OVERDUE_GRACE, Seen};
use super::link::Link;
use super::session::{Failure, Session};
use crate::telemetry::Event;

/// The most messages one sweep releases from one hold queue, so one stuck queue with a
/// long backlog does not keep the others waiting for their sweep.
pub(super) const MAX_RELEASED: usize = 10_000;

/// The header a quorum queue adds to a message it hands out again; it counts the
/// sweeper's looks, not the job's attempts, so it does not travel on.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// Sweep the hold queues of `link` until it is closed.
pub(super) async fn sweep(link: Arc<Link>) {
    loop {
        tokio::time::sleep(link.options.hold_sweep_interval).await;
        // An error here means the link was closed; an outage is waited out.
        let Ok(session) = link.session().await else {
            return;
        };
        for mut watch in link.holds.to_sweep() {
            // Bounded, because a queue without a leader can leave a get or a confirm
            // unanswered, and the other queues must not wait for it; dropping the sweep
            // drops its channel, which hands back what it took.
            let limit = link.options.outage_timeout;
            match tokio::time::timeout(limit, sweep_queue(&session, &mut watch)).await {
                Ok(Ok(swept)) => {
                    watch.seen.found(swept.found, Instant::now());
                    report(&link, &watch, swept.released);
                }
                Ok(Err(error)) => {
                    tracing::debug!(hold = %watch.hold.name, ?error, "sweeping a hold queue failed; the next sweep tries again");
                }
                Err(_) => {
                    tracing::debug!(hold = %watch.hold.name, ?limit, "sweeping a hold queue took too long; the next sweep tries again");
                }
            }
            link.holds.swept(&watch.hold, watch.seen);
        }
        link.holds.prune(Instant::now());
    }
}

fn report(link: &Link, watch: &Hold, released: usize) {
    if released == 0 {
        return;
    }
    tracing::warn!(
        hold = %watch.hold.name,
        queue = %watch.queue,
        released,
        "the broker kept messages in a hold queue past their delay; released them onto the work queue (see docs/scaling.md, \"Known failure, in the broker\")"
    );
    link.options.telemetry.emit(&Event::OverdueReleased {
        queue: &watch.queue,
        count: released as u64,
    });
}

/// What one sweep of one hold queue did.
#[derive(Debug, Default)]
struct Swept {
    /// Messages released onto the work queue.
    released: usize,
    /// What the sweep's last get found.
    found: Found,
}

/// Release the overdue heads of `watch`'s hold queue onto its work queue.
async fn sweep_queue(session: &Session, watch: &mut Hold) -> Result<Swept, Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let swept = release_overdue(session, &channel, watch).await;
    // Closing hands back anything taken and not acked, should a step above have failed.
    if channel.status().connected() {
        let _ = channel.close(200, "hold queue swept".into()).await;
    }
    swept
}

async fn release_overdue(
    session: &Session,
    channel: &Channel,
    watch: &mut Hold,
) -> Result<Swept, Failure> {
    let due = Duration::from_millis(watch.hold.ttl_ms) + OVERDUE_GRACE;
    let mut swept = Swept::default();
    while swept.released < MAX_RELEASED {
        let taken = match channel
            .basic_get(
                watch.hold.name.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
        {
            Ok(taken) => taken,
            // `NOT_FOUND`: the queue expired or was deleted.
            Err(error) if error.is_amqp_soft_error() => {
                swept.found = Found::Gone;
                break;
            }
            Err(error) => return Err(Failure::Lost(error)),
        };
        let Some(taken) = taken else {
            swept.found = Found::Empty;
            break;
        };
        let head = taken.delivery;
        let now = (SystemTime::now(), Instant::now());
        if held_for(&mut watch.seen, &head.properties, &head.data, now) <= due {
            head.acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
                .map_err(Failure::Lost)?;
            break;
        }
        session
            .publish(
                &watch.queue,
                &head.data,
                released_properties(&head.properties),
            )
            .await?;
        head.acker
            .ack(BasicAckOptions::default())
            .await
            .map_err(Failure::Lost)?;
        swept.released += 1;
    }
    Ok(swept)
}

/// The properties a released message goes to its work queue with: what it was held
/// with, less the quorum queue's count of the sweeper's looks.
fn released_properties(held: &BasicProperties) -> BasicProperties {
    let mut properties = held.clone();
    if let Some(headers) = properties.headers()
        && headers.contains_key(DELIVERY_COUNT)
    {
        let mut kept = headers.inner().clone();
        kept.remove(DELIVERY_COUNT);
        properties = properties.with_headers(kept.into());
    }
    properties
}

/// How long the head with `properties` and `body` has been held at least: since its
/// timestamp, or else since this sweeper first saw it at the head. `now` is the wall
/// clock and the monotonic clock read together.
fn held_for(
    seen: &mut Seen,
    properties: &BasicProperties,
    body: &[u8],
    (wall, now): (SystemTime, Instant),
) -> Duration {
    if let Some(held) = stamped_age(properties, wall) {
        seen.head = None;
        return held;
    }
    let key = body_hash(body);
    match seen.head {
        Some((hash, since)) if hash == key => now.duration_since(since),
        _ => {
            seen.head = Some((key, now));
            Duration::ZERO
        }
    }
}

/// How long ago `properties`' timestamp was at `wall`; `None` without a timestamp, or
/// with one in the future or beyond what a clock can show, which says nothing.
fn stamped_age(properties: &BasicProperties, wall: SystemTime) -> Option<Duration> {
    let seconds = (*properties.timestamp())?;
    let stamped = UNIX_EPOCH.checked_add(Duration::from_secs(seconds))?;
    wall.duration_since(stamped).ok()
}

fn body_hash(body: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    use lapin::types::{AMQPValue, FieldTable};

    use super::super::RabbitMqOptions;

    fn stamped(timestamp: Option<u64>) -> BasicProperties {
        let properties = BasicProperties::default();
        match timestamp {
            Some(seconds) => properties.with_timestamp(seconds),
            None => properties,
        }
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn a_stamped_head_has_been_held_since_its_timestamp() {
        let now = (at(1_042), Instant::now());
        let held = held_for(&mut Seen::default(), &stamped(Some(1_000)), b"a", now);
        assert_eq!(held, Duration::from_secs(42));
    }

    #[test]
    fn an_unstamped_head_counts_as_held_since_it_was_first_seen_at_the_head() {
        let mut seen = Seen::default();
        let (wall, first) = (at(5_000), Instant::now());
        assert_eq!(
            held_for(&mut seen, &stamped(None), b"a", (wall, first)),
            Duration::ZERO
        );
        let later = first + Duration::from_secs(30);
        assert_eq!(
            held_for(&mut seen, &stamped(None), b"a", (wall, later)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn another_head_starts_its_own_count() {
        let mut seen = Seen::default();
        let (wall, first) = (at(5_000), Instant::now());
        held_for(&mut seen, &stamped(None), b"a", (wall, first));
        let later = (wall, first + Duration::from_secs(30));
        assert_eq!(
            held_for(&mut seen, &stamped(None), b"b", later),
            Duration::ZERO
        );
    }

    #[test]
    fn a_timestamp_in_the_future_or_beyond_any_clock_counts_as_none() {
        for timestamp in [9_999, u64::MAX] {
            let mut seen = Seen::default();
            let first = Instant::now();
            let later = first + Duration::from_secs(9);
            let head = stamped(Some(timestamp));
            assert_eq!(
                held_for(&mut seen, &head, b"a", (at(5_000), first)),
                Duration::ZERO
            );
            assert_eq!(
                held_for(&mut seen, &head, b"a", (at(5_000), later)),
                Duration::from_secs(9),
                "timestamp {timestamp}"
            );
        }
    }

    #[test]
    fn a_released_message_keeps_its_headers_but_not_the_quorum_delivery_count() {
        let mut headers = FieldTable::default();
        headers.insert("x-attempt".into(), AMQPValue::LongUInt(2));
        headers.insert(DELIVERY_COUNT.into(), AMQPValue::LongLongInt(7));
        let held = BasicProperties::default()
            .with_message_id("job".into())
            .with_headers(headers);
        let released = released_properties(&held);
        let headers = released.headers().clone().expect("headers");
        assert_eq!(
            headers.inner().get("x-attempt"),
            Some(&AMQPValue::LongUInt(2))
        );
        assert_eq!(headers.inner().get(DELIVERY_COUNT), None);
        assert_eq!(released.message_id(), held.message_id());
    }

    #[test]
    fn the_sweep_interval_cannot_be_zero() {
        let options = RabbitMqOptions::default().hold_sweep_interval(Duration::ZERO);
        assert!(options.hold_sweep_interval >= Duration::from_millis(10));
    }
}
