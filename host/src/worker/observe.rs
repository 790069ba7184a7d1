//! What one delivery reports to the [`Metrics`]: in flight while it lives, its handler's
//! and its own duration, how it was settled and why a publish failed.
//!
//! The series a delivery counts under: its queue, and the job type of the route whose
//! handler ran it, or [`OTHER_JOB_TYPE`](crate::metrics::OTHER_JOB_TYPE) when none did
//! (see [`crate::metrics`]), so a producer's made-up job types cannot grow the label set. Labels are shared
//! `Arc<str>`s, so counting allocates nothing of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::registry::Route;
use super::tally::Settled;
use crate::broker::BrokerError;
use crate::metrics::{InFlight, JobOutcome, JobSeries, Metrics};

/// One delivery's metrics, from its pull to its settlement.
#[derive(Debug)]
pub(super) struct Observation<'a> {
    metrics: &'a Metrics,
    series: JobSeries,
    started: Instant,
    _in_flight: InFlight,
}

impl<'a> Observation<'a> {
    /// A delivery from `queue` starts; a `redelivered` one is counted as such.
    pub(super) fn start(metrics: &'a Metrics, queue: &Arc<str>, redelivered: bool) -> Self {
        if redelivered {
            metrics.redelivered(queue);
        }
        Self {
            metrics,
            series: JobSeries {
                queue: queue.clone(),
                job_type: metrics.other_job_type().clone(),
            },
            started: Instant::now(),
            _in_flight: metrics.in_flight(),
        }
    }

    /// Run `handler`, the handler of `route`, timing it; the delivery counts under the
    /// route's job type from now on.
    pub(super) async fn handler<T>(
        &mut self,
        route: &Route,
        handler: impl Future<Output = T>,
    ) -> T {
        self.series.job_type = route.job_type.clone();
        let started = Instant::now();
        let output = handler.await;
        self.metrics
            .handler_ran(&self.series.job_type, started.elapsed());
        output
    }

    /// The delivery was settled as `settled`; `dead_letter` is the reason of a dead letter.
    pub(super) fn settled(&self, settled: Settled, dead_letter: Option<&str>) {
        let outcome = match settled {
            Settled::Completed => JobOutcome::Completed,
            Settled::Retried => JobOutcome::Retried,
            Settled::Deferred => JobOutcome::Deferred,
            Settled::DeadLettered => JobOutcome::DeadLettered,
        };
        self.metrics
            .settled(&self.series, outcome, self.started.elapsed());
        if let Some(reason) = dead_letter {
            self.metrics.dead_lettered(&self.series.queue, reason);
        }
    }

    /// Publishing what settles the delivery failed with `err`.
    pub(super) fn publish_failed(&self, err: &BrokerError) {
        self.metrics
            .publish_failed(&self.series.queue, err.is_permanent());
    }
}
