//! What one delivery reports to the [`Metrics`] and its [`Activity`](crate::activity::Activity):
//! in flight while it lives, its handler's and its own duration, how it was settled, why
//! a publish failed, and each failed attempt with its reason.
//!
//! The series a delivery counts under: its queue, and the job type of the route whose
//! handler ran it, or [`OTHER_JOB_TYPE`](crate::metrics::OTHER_JOB_TYPE) when none did
//! (see [`crate::metrics`]), so a producer's made-up job types cannot grow the label set. Labels are shared
//! `Arc<str>`s, so counting allocates nothing of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use jobhost_sdk::JobError;

use super::registry::Route;
use super::tally::Settled;
use crate::activity::{Delivering, Failure, FailureOutcome};
use crate::broker::BrokerError;
use crate::envelope::Envelope;
use crate::job::Outcome;
use crate::metrics::{InFlight, JobOutcome, JobSeries, Metrics};
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

    /// Run `handler`, the handler of `route`, timing it; the delivery counts under the
    /// route's job type from now on.
    pub(super) async fn handler(
        &mut self,
        route: &Route,
        handler: impl Future<Output = Outcome>,
    ) -> Outcome {
        self.series.job_type = route.job_type.clone();
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

    /// The delivery of `job` (none when it was not an envelope) was settled as
    /// `settled`; `dead_letter` is the reason of a dead letter.
    pub(super) fn settled(
        &self,
        settled: Settled,
        job: Option<&Envelope>,
        dead_letter: Option<&str>,
    ) {
        let outcome = match settled {
            Settled::Completed => JobOutcome::Completed,
            Settled::Retried => JobOutcome::Retried,
            Settled::Deferred => JobOutcome::Deferred,
            Settled::DeadLettered => JobOutcome::DeadLettered,
        };
        self.metrics
            .settled(&self.series, outcome, self.started.elapsed());
        let activity = self.metrics.activity();
        activity.settled(&self.series.queue, outcome);
        if let Some(reason) = dead_letter {
            self.metrics.dead_lettered(&self.series.queue, reason);
        }
        let (outcome, reason) = match (settled, dead_letter, &self.failure) {
            (Settled::DeadLettered, Some(reason), _) => (FailureOutcome::DeadLettered, reason),
            (Settled::Retried, _, Some(failure)) => (FailureOutcome::Retried, failure.as_str()),
            _ => return,
        };
        activity.failed(Failure {
            at_ms: 0,
            queue: self.series.queue.to_string(),
            job_type: job.map(|job| job.job_type.clone()),
            job_id: job.map(|job| job.job_id),
            attempt: job.map_or(0, |job| job.attempt),
            outcome,
            reason: reason.to_owned(),
        });
    }

    /// Publishing what settles the delivery failed with `err`.
    pub(super) fn publish_failed(&self, err: &BrokerError) {
        self.metrics
            .publish_failed(&self.series.queue, err.is_permanent());
    }
}
