//! What one delivery reports while it lives (in flight, its handler's duration, why a
//! publish failed), and the one [`SettledJob`] event it hands to every [`Observer`] when
//! it is settled (see [`crate::job`] for the observers).
//!
//! The series a delivery counts under: its queue, and the job type of its route once
//! found, or [`OTHER_JOB_TYPE`](crate::metrics::OTHER_JOB_TYPE) when none did
//! (see [`crate::metrics`]), so a producer's made-up job types cannot grow the label set. Labels are shared
//! `Arc<str>`s, so counting allocates nothing of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use jobhost_sdk::JobError;

use super::registry::Route;
use super::tally::Tally;
use crate::activity::Delivering;
use crate::broker::BrokerError;
use crate::envelope::Envelope;
use crate::job::{JobRef, Observer, Outcome, Settled, SettledJob};
use crate::metrics::{InFlight, JobSeries, Metrics};
use crate::text::{REASON_MAX, bounded};

/// One delivery's metrics, from its pull to its settlement.
#[derive(Debug)]
pub(super) struct Observation<'a> {
    metrics: &'a Metrics,
    series: JobSeries,
    started: Instant,
    /// Why the handler's attempt failed, when it did (not when it deferred).
    failure: Option<String>,
    _in_flight: InFlight,
    _delivering: Delivering,
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
            failure: None,
            _in_flight: metrics.in_flight(),
            _delivering: metrics.activity().delivering(queue),
        }
    }

    /// The delivery's job type has `route`: it counts under the route's job type from now
    /// on (a loaded manifest's, so the label set stays bounded), whether its handler runs
    /// or it expires, is cancelled or is held back by a cap first.
    pub(super) fn counts_under(&mut self, route: &Route) {
        self.series.job_type = route.job_type.clone();
    }

    /// Run `handler`, timing it.
    pub(super) async fn handler(&mut self, handler: impl Future<Output = Outcome>) -> Outcome {
        let started = Instant::now();
        let output = handler.await;
        self.metrics
            .handler_ran(&self.series.job_type, started.elapsed());
        self.failure = match &output {
            Outcome::Failed(JobError::Deferred { .. }) | Outcome::Completed { .. } => None,
            Outcome::Failed(failure) => Some(bounded(&failure.to_string(), REASON_MAX).into()),
            Outcome::Crashed(reason) => Some(bounded(reason, REASON_MAX).into()),
            Outcome::Undecodable(reason) => Some(bounded(reason, REASON_MAX).into()),
        };
        output
    }

    /// The delivery of `job` (none when it was not an envelope) was settled as `settled`:
    /// hand it to the worker's `tally`, the metrics and the activity.
    pub(super) fn settled(&self, settled: &Settled, job: Option<&Envelope>, tally: &Tally) {
        let event = SettledJob {
            queue: &self.series.queue,
            series_job_type: &self.series.job_type,
            job: job.map(|job| JobRef {
                job_id: job.job_id,
                job_type: &job.job_type,
                attempt: job.attempt,
            }),
            settled,
            failure: self.failure.as_deref(),
            elapsed: self.started.elapsed(),
        };
        let observers: [&dyn Observer; 3] = [tally, self.metrics, self.metrics.activity()];
        for observer in observers {
            observer.settled(&event);
        }
    }

    /// Publishing what settles the delivery failed with `err`.
    pub(super) fn publish_failed(&self, err: &BrokerError) {
        self.metrics
            .publish_failed(&self.series.queue, err.is_permanent());
    }
}
