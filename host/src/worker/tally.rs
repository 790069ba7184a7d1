//! What the worker settled, summed up in one log line per period instead of one per job.
//!
//! A log line per completed job costs more CPU than a no-op job itself (formatting and a
//! write to stderr each), so completions are logged at debug, and at info the worker says
//! every [`SUMMARY_EVERY`] how many jobs completed, were retried, deferred, expired,
//! dead-lettered and cancelled. Retries, deferrals, expiries, dead letters and
//! cancellations keep their own info and warn lines.
//!
//! The tally is the worker's own, counted by a direct call where a delivery is settled,
//! not an observer of the host's [`Telemetry`](crate::telemetry::Telemetry): it sums this
//! worker's settlements, while a telemetry may be shared by several workers (and nobody
//! but the worker reads the tally).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::job::Settled;

/// How often the summary line is written, when anything was settled.
pub(super) const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Settlements since the last summary.
#[derive(Debug, Default)]
pub(super) struct Tally {
    completed: AtomicU64,
    retried: AtomicU64,
    deferred: AtomicU64,
    expired: AtomicU64,
    dead_lettered: AtomicU64,
    cancelled: AtomicU64,
    throttled: AtomicU64,
}

/// One period's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Counts {
    pub(super) completed: u64,
    pub(super) retried: u64,
    pub(super) deferred: u64,
    pub(super) expired: u64,
    pub(super) dead_lettered: u64,
    pub(super) cancelled: u64,
    pub(super) throttled: u64,
}

impl Tally {
    /// Count one settlement.
    pub(super) fn count(&self, settled: &Settled) {
        let counter = match settled {
            Settled::Completed => &self.completed,
            Settled::Retried => &self.retried,
            Settled::Deferred => &self.deferred,
            Settled::Expired(_) => &self.expired,
            Settled::DeadLettered(_) => &self.dead_lettered,
            Settled::Cancelled(_) => &self.cancelled,
            Settled::Throttled(_) => &self.throttled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last call, starting over.
    pub(super) fn take(&self) -> Counts {
        Counts {
            completed: self.completed.swap(0, Ordering::Relaxed),
            retried: self.retried.swap(0, Ordering::Relaxed),
            deferred: self.deferred.swap(0, Ordering::Relaxed),
            expired: self.expired.swap(0, Ordering::Relaxed),
            dead_lettered: self.dead_lettered.swap(0, Ordering::Relaxed),
            cancelled: self.cancelled.swap(0, Ordering::Relaxed),
            throttled: self.throttled.swap(0, Ordering::Relaxed),
        }
    }

    /// Log a summary every [`SUMMARY_EVERY`] in which something was settled, until `stop`;
    /// then one last one for what is left.
    pub(super) async fn report(&self, stop: CancellationToken) {
        let mut every = tokio::time::interval(SUMMARY_EVERY);
        every.tick().await;
        loop {
            let stopping = tokio::select! {
                _ = every.tick() => false,
                () = stop.cancelled() => true,
            };
            let counts = self.take();
            if counts != Counts::default() {
                info!(
                    completed = counts.completed,
                    retried = counts.retried,
                    deferred = counts.deferred,
                    expired = counts.expired,
                    dead_lettered = counts.dead_lettered,
                    cancelled = counts.cancelled,
                    throttled = counts.throttled,
                    "jobs settled since the last summary"
                );
            }
            if stopping {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::job::{Cancellation, DeadCause, Deadline, Operator, Start, Throttle};

    #[test]
    fn each_settlement_is_counted_once_and_a_summary_starts_the_count_over() {
        let tally = Tally::default();
        for settled in [
            Settled::Completed,
            Settled::Completed,
            Settled::Retried,
            Settled::Deferred,
            Settled::Expired(
                Deadline::from_epoch_ms(0)
                    .check(1, || Start::Delivery)
                    .expect_err("expired"),
            ),
            Settled::DeadLettered(DeadCause::Malformed),
            Settled::Cancelled(Cancellation {
                by: Operator::new("alice@host").expect("an operator"),
                at_ms: 0,
            }),
            Settled::Throttled(Throttle::Concurrency),
        ] {
            tally.count(&settled);
        }
        assert_eq!(
            tally.take(),
            Counts {
                completed: 2,
                retried: 1,
                deferred: 1,
                expired: 1,
                dead_lettered: 1,
                cancelled: 1,
                throttled: 1,
            }
        );
        assert_eq!(tally.take(), Counts::default());
    }
}
