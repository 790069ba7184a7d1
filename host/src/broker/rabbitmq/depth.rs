//! How many messages wait around a work queue: passive declarations of the work queue,
//! its dead-letter queue and the hold queues this backend declared.
//!
//! RabbitMQ answers a passive declaration with the queue's ready-message count, so a depth
//! costs one round trip per queue and takes nothing off any queue. Hold queues are named
//! after their delays, which the broker cannot list over AMQP, so the backend counts those
//! it published into ([`HoldQueues`]); a hold queue of an earlier process is not counted
//! until this one publishes into it again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use super::RabbitMqBackend;
use super::admin::lost;
use crate::broker::{BrokerError, HoldQueue, QueueDepth, dead_letter_queue_name};

/// The most hold queues remembered per work queue. Because a guest may defer by any
/// delay, the distinct delays of one queue are unbounded; beyond this many, the one
/// published into longest ago is forgotten (and its messages go uncounted).
pub(super) const MAX_HOLD_QUEUES: usize = 64;

/// The hold queues published into through a backend, per work queue, with when each was
/// last published into; one unused for longer than its `x-expires` is gone and forgotten.
/// The depth counts them and the sweeper (`sweep`) looks after them.
#[derive(Debug, Default)]
pub(super) struct HoldQueues(Mutex<HashMap<String, Used>>);

/// Hold queues by name, each with when it was last published into.
type Used = HashMap<String, (HoldQueue, Instant)>;

impl HoldQueues {
    /// `hold`, in front of `queue`, was published into now.
    pub(super) fn used(&self, queue: &str, hold: &HoldQueue) {
        let now = Instant::now();
        let mut all = self.0.lock().expect("hold queue list poisoned");
        let holds = all.entry(queue.to_owned()).or_default();
        holds.retain(|_, (hold, used)| alive(hold, *used, now));
        if holds.len() >= MAX_HOLD_QUEUES && !holds.contains_key(&hold.name) {
            let oldest = holds
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                holds.remove(&oldest);
            }
        }
        holds.insert(hold.name.clone(), (hold.clone(), now));
    }

    /// The names of `queue`'s hold queues that may still exist.
    fn of(&self, queue: &str) -> Vec<String> {
        self.live()
            .into_iter()
            .filter(|(work, _)| work == queue)
            .map(|(_, hold)| hold.name)
            .collect()
    }

    /// Every hold queue that may still exist, with the work queue it releases onto.
    pub(super) fn live(&self) -> Vec<(String, HoldQueue)> {
        let now = Instant::now();
        let all = self.0.lock().expect("hold queue list poisoned");
        all.iter()
            .flat_map(|(queue, holds)| {
                holds
                    .values()
                    .filter(move |(hold, used)| alive(hold, *used, now))
                    .map(move |(hold, _)| (queue.clone(), hold.clone()))
            })
            .collect()
    }
}

/// Whether `hold`, last published into at `used`, may still exist at `now`: the broker
/// deletes it once unused for its `x-expires`.
fn alive(hold: &HoldQueue, used: Instant, now: Instant) -> bool {
    now.duration_since(used) < Duration::from_millis(hold.expires_ms())
}

impl RabbitMqBackend {
    /// The messages waiting on `queue`, in `{queue}.dead` and in the hold queues this
    /// backend published into. A queue that does not exist (yet, or any more) counts as
    /// empty.
    pub async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        let session = self.admin_session(queue).await?;
        let mut counter = Counter {
            session: &session,
            channel: None,
        };
        let mut depth = QueueDepth {
            ready: counter.count(queue).await?,
            dead: counter.count(&dead_letter_queue_name(queue)).await?,
            held: 0,
        };
        for hold in self.link.holds.of(queue) {
            depth.held += counter.count(&hold).await?;
        }
        Ok(depth)
    }
}

/// Passive declarations on one channel, replaced when a missing queue closes it.
struct Counter<'a> {
    session: &'a super::session::Session,
    channel: Option<Channel>,
}

impl Counter<'_> {
    async fn count(&mut self, queue: &str) -> Result<u64, BrokerError> {
        let channel = match self.channel.take() {
            Some(channel) if channel.status().connected() => channel,
            _ => self.session.channel().await.map_err(lost)?,
        };
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        match channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
        {
            Ok(declared) => {
                self.channel = Some(channel);
                Ok(u64::from(declared.message_count()))
            }
            // `NOT_FOUND` closes the channel; the next count opens another.
            Err(error) if error.is_amqp_soft_error() => Ok(0),
            Err(error) => Err(lost(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::Granularity;

    fn hold(queue: &str, secs: u64) -> HoldQueue {
        let delay = Granularity::default()
            .round(Duration::from_secs(secs))
            .expect("fits");
        HoldQueue::for_delay(queue, delay)
    }

    #[test]
    fn hold_queues_are_remembered_per_work_queue_and_bounded() {
        let holds = HoldQueues::default();
        for secs in 1..=(MAX_HOLD_QUEUES as u64 + 10) {
            holds.used("q", &hold("q", secs));
        }
        holds.used("other", &hold("other", 1));
        let of_q = holds.of("q");
        assert_eq!(of_q.len(), MAX_HOLD_QUEUES, "at most the bound per queue");
        assert!(
            of_q.contains(&format!(
                "q.deferred.{}",
                (MAX_HOLD_QUEUES as u64 + 10) * 1000
            )),
            "the latest is kept: {of_q:?}"
        );
        assert!(
            !of_q.contains(&"q.deferred.1000".to_owned()),
            "the oldest is forgotten"
        );
        assert_eq!(holds.of("other"), vec!["other.deferred.1000".to_owned()]);
        assert!(holds.of("unknown").is_empty());
    }
}
