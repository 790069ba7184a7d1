//! What the host did lately, for the dashboard: plugin reloads, failed attempts, and each
//! queue's settled jobs and deliveries in flight.
//!
//! One [`Activity`] per host, cheap to clone (an `Arc` inside): an [`Observer`] attached
//! to the host's [`Telemetry`](crate::telemetry::Telemetry), fed by the events the worker
//! and the loader emit (see [`crate::telemetry`] for which), and read by the admin API.
//!
//! # Contract
//! - Memory is bounded whatever producers and plugins do: at most [`RELOAD_EVENTS`]
//!   reload events and [`RECENT_FAILURES`] failures are kept (the oldest go first), each
//!   reason cut to [`SHOWN_REASON_MAX`] bytes with its control characters escaped, and
//!   one set of counters per queue the worker consumes (queues of loaded manifests).
//! - Counting a delivery's start, its settlement and its end costs a shared read lock and
//!   an atomic addition each; a failure or a reload takes a short lock of its own.
//! - A lock poisoned by a panic elsewhere is used as it is: a count or a history is never
//!   left half written, and a delivery's end may be observed while a panic unwinds.
//! - Times are milliseconds since the Unix epoch, as a browser's `Date` reads them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::{PluginChange, Settled, SettledJob};
use crate::telemetry::{Event, Observer};
pub use crate::text::SHOWN_REASON_MAX;
use crate::text::{NAME_MAX, bounded};

/// Reload events kept, across all plugin files.
pub const RELOAD_EVENTS: usize = 100;
/// Failed attempts kept.
pub const RECENT_FAILURES: usize = 50;

/// The host's recent activity; see the [module doc](self). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Activity {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reloads: Mutex<VecDeque<ReloadEvent>>,
    failures: Mutex<VecDeque<Failure>>,
    queues: RwLock<HashMap<Arc<str>, QueueCounters>>,
}

/// Something that happened to a plugin file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadEvent {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The plugin file.
    pub file: String,
    /// What happened.
    pub change: PluginChange,
}

/// A failed attempt, retried or dead-lettered, or a job that expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// When it was settled, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The queue it came from.
    pub queue: String,
    /// Its job type, bounded; none when the message was not an envelope.
    pub job_type: Option<String>,
    /// Its job id; none when the message was not an envelope.
    pub job_id: Option<Uuid>,
    /// The attempt that failed (0 when the message was not an envelope).
    pub attempt: u32,
    /// `retried`, `expired`, `dead_lettered` or `cancelled`: the [`Settled::label`] of its settlement.
    pub outcome: String,
    /// Why, bounded to [`SHOWN_REASON_MAX`].
    pub reason: String,
}

/// A queue's jobs settled since the host started, and its deliveries in flight now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueActivity {
    /// Deliveries of this host being run or settled now (its unsettled deliveries).
    pub in_flight: u64,
    /// Completed.
    pub completed: u64,
    /// Failed and retried.
    pub retried: u64,
    /// Deferred.
    pub deferred: u64,
    /// Expired: not run because their deadline passed (and dead-lettered as such).
    pub expired: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Cancelled by an operator (and so in the dead-letter queue too).
    #[serde(default)]
    pub cancelled: u64,
    /// Held back by a concurrency cap, each wait counted (a host of an older version
    /// leaves it out).
    #[serde(default)]
    pub throttled: u64,
}

#[derive(Debug, Default)]
struct QueueCounters {
    in_flight: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    deferred: AtomicU64,
    expired: AtomicU64,
    dead_lettered: AtomicU64,
    cancelled: AtomicU64,
    throttled: AtomicU64,
}

impl Activity {
    /// A plugin file changed as `change`.
    fn reloaded(&self, file: &str, change: PluginChange) {
        let event = ReloadEvent {
            at_ms: now_ms(),
            file: bounded(file, NAME_MAX).into_owned(),
            change,
        };
        push_bounded(&self.inner.reloads, event, RELOAD_EVENTS);
    }

    /// Every kept reload event, newest first.
    pub fn reloads(&self) -> Vec<ReloadEvent> {
        let reloads = self.inner.reloads.lock();
        let reloads = reloads.unwrap_or_else(PoisonError::into_inner);
        reloads.iter().rev().cloned().collect()
    }

    /// The kept failed attempts, newest first.
    pub fn failures(&self) -> Vec<Failure> {
        let failures = self.inner.failures.lock();
        let failures = failures.unwrap_or_else(PoisonError::into_inner);
        failures.iter().rev().cloned().collect()
    }

    /// The counts of `queue`; zeros for a queue nothing was delivered from.
    pub fn queue(&self, queue: &str) -> QueueActivity {
        let queues = self.inner.queues.read();
        let queues = queues.unwrap_or_else(PoisonError::into_inner);
        queues.get(queue).map_or_else(QueueActivity::default, |q| {
            let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
            QueueActivity {
                in_flight: read(&q.in_flight),
                completed: read(&q.completed),
                retried: read(&q.retried),
                deferred: read(&q.deferred),
                expired: read(&q.expired),
                dead_lettered: read(&q.dead_lettered),
                cancelled: read(&q.cancelled),
                throttled: read(&q.throttled),
            }
        })
    }

    /// An attempt failed just now: `failure.at_ms` is set, and `failure.reason` and
    /// `failure.job_type` are bounded, here.
    fn failed(&self, mut failure: Failure) {
        failure.at_ms = now_ms();
        failure.reason = bounded(&failure.reason, SHOWN_REASON_MAX).into_owned();
        failure.job_type = failure
            .job_type
            .map(|job_type| bounded(&job_type, NAME_MAX).into_owned());
        push_bounded(&self.inner.failures, failure, RECENT_FAILURES);
    }

    /// `count` on the counters of `queue`, made on its first delivery.
    fn on_queue(&self, queue: &Arc<str>, count: impl Fn(&QueueCounters)) {
        {
            let queues = self.inner.queues.read();
            let queues = queues.unwrap_or_else(PoisonError::into_inner);
            if let Some(counters) = queues.get(queue) {
                count(counters);
                return;
            }
        }
        let mut queues = self
            .inner
            .queues
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        count(queues.entry(Arc::clone(queue)).or_default());
    }

    /// Count the settlement on its queue; keep a retried, expired or dead-lettered job
    /// with its reason.
    fn settled(&self, job: &SettledJob<'_>) {
        self.on_queue(job.queue, |counters| {
            let counter = match job.settled {
                Settled::Completed => &counters.completed,
                Settled::Retried => &counters.retried,
                Settled::Deferred => &counters.deferred,
                Settled::Expired(_) => &counters.expired,
                Settled::DeadLettered(_) => &counters.dead_lettered,
                Settled::Cancelled(_) => &counters.cancelled,
                Settled::Throttled(_) => &counters.throttled,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
        let reason = match (job.settled, job.failure) {
            (Settled::DeadLettered(cause), _) => cause.to_string(),
            (Settled::Expired(expired), _) => expired.to_string(),
            (Settled::Cancelled(cancellation), _) => cancellation.to_string(),
            (Settled::Retried, Some(failure)) => failure.to_owned(),
            _ => return,
        };
        self.failed(Failure {
            at_ms: 0,
            queue: job.queue.to_string(),
            job_type: job.job.map(|job| job.job_type.to_owned()),
            job_id: job.job.map(|job| job.job_id),
            attempt: job.job.map_or(0, |job| job.attempt),
            outcome: job.settled.label().to_owned(),
            reason,
        });
    }
}

impl Observer for Activity {
    fn observe(&self, event: &Event<'_>) {
        match *event {
            Event::DeliveryStarted { queue, .. } => self.on_queue(queue, |counters| {
                counters.in_flight.fetch_add(1, Ordering::Relaxed);
            }),
            Event::DeliveryEnded { queue } => self.on_queue(queue, |counters| {
                counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            }),
            Event::Settled(job) => self.settled(&job),
            Event::PluginChanged { file, change } => {
                if change.is_news() {
                    self.reloaded(file, change.clone());
                }
            }
            // Not what the dashboard shows: its metrics and logs tell these.
            Event::HandlerRan { .. }
            | Event::PublishFailed { .. }
            | Event::BrokerReconnected
            | Event::OverdueReleased { .. }
            | Event::PauseLearnt { .. }
            | Event::ScheduleFired { .. }
            | Event::TicksMissed { .. }
            | Event::DuplicateRefused { .. } => {}
        }
    }
}

fn push_bounded<T>(ring: &Mutex<VecDeque<T>>, item: T, max: usize) {
    let mut ring = ring.lock().unwrap_or_else(PoisonError::into_inner);
    if ring.len() == max {
        ring.pop_front();
    }
    ring.push_back(item);
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Telemetry;

    fn failure(reason: &str) -> Failure {
        Failure {
            at_ms: 0,
            queue: "q".into(),
            job_type: Some("t\nforged".into()),
            job_id: None,
            attempt: 1,
            outcome: "retried".into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn histories_keep_the_newest_entries_up_to_their_bounds() {
        let activity = Activity::default();
        for n in 0..RECENT_FAILURES + 5 {
            activity.failed(failure(&format!("failure {n}")));
        }
        let failures = activity.failures();
        assert_eq!(failures.len(), RECENT_FAILURES);
        assert_eq!(
            failures[0].reason,
            format!("failure {}", RECENT_FAILURES + 4)
        );
        for n in 0..RELOAD_EVENTS + 5 {
            let file = if n % 2 == 0 { "a.wasm" } else { "b.wasm" };
            let cause = format!("refusal {n}");
            activity.reloaded(file, PluginChange::Refused { cause });
        }
        let reloads = activity.reloads();
        assert_eq!(reloads.len(), RELOAD_EVENTS);
        let newest = PluginChange::Refused {
            cause: format!("refusal {}", RELOAD_EVENTS + 4),
        };
        assert_eq!(reloads[0].change, newest, "newest first");
    }

    #[test]
    fn a_hostile_reason_and_job_type_are_cut_and_escaped() {
        let activity = Activity::default();
        activity.failed(failure(&"x".repeat(100_000)));
        let kept = &activity.failures()[0];
        assert!(kept.reason.len() <= SHOWN_REASON_MAX + crate::text::MARKER_MAX);
        assert_eq!(kept.job_type.as_deref(), Some("t\\nforged"));
    }

    #[test]
    fn a_queue_counts_its_settlements_and_its_deliveries_in_flight() {
        let activity = Activity::default();
        let queue: Arc<str> = "q".into();
        let telemetry = Telemetry::builder().attach(activity.clone()).build();
        let delivering = telemetry.delivering(&queue, false);
        let expired = crate::job::Deadline::from_epoch_ms(0)
            .check(1, || crate::job::Start::Delivery)
            .expect_err("expired");
        for settled in [
            Settled::Completed,
            Settled::Expired(expired.clone()),
            Settled::DeadLettered(crate::job::DeadCause::Malformed),
            Settled::Throttled(crate::job::Throttle::Concurrency),
        ] {
            telemetry.emit(&Event::Settled(SettledJob {
                queue: &queue,
                series_job_type: &queue,
                job: None,
                settled: &settled,
                failure: None,
                elapsed: std::time::Duration::ZERO,
            }));
        }
        let counts = activity.queue("q");
        assert_eq!((counts.in_flight, counts.completed), (1, 1));
        assert_eq!((counts.expired, counts.dead_lettered), (1, 1));
        assert_eq!(counts.throttled, 1);
        let failures = activity.failures();
        assert_eq!(
            (failures[1].outcome.as_str(), failures[1].reason.clone()),
            ("expired", expired.to_string()),
            "an expired job is shown with its reason"
        );
        drop(delivering);
        assert_eq!(activity.queue("q").in_flight, 0);
        assert_eq!(activity.queue("unknown"), QueueActivity::default());
    }
}
