//! What one delivery reports while it lives: its start and end, its handler's duration, why
//! a publish failed, and its settlement, each an [`Event`] on the worker's [`Telemetry`]
//! (see [`crate::telemetry`] for who observes them); the settlement is also counted in the
//! worker's own [`Tally`].
//!
//! The series a delivery counts under: its queue, and the job type of its route once
//! found, or [`OTHER_JOB_TYPE`] when none was, so a producer's made-up job types cannot
//! grow a label set. Both are shared `Arc<str>`s, so reporting allocates nothing of its
//! own.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use jobhost_sdk::JobError;

use super::registry::Route;
use super::tally::Tally;
use crate::broker::BrokerError;
use crate::envelope::Envelope;
use crate::job::{JobRef, OTHER_JOB_TYPE, Outcome, Settled, SettledJob};
use crate::telemetry::{Delivering, Event, Telemetry};
use crate::text::{REASON_MAX, bounded};

/// [`OTHER_JOB_TYPE`], made once and shared by every delivery.
static OTHER: LazyLock<Arc<str>> = LazyLock::new(|| OTHER_JOB_TYPE.into());

/// One delivery's reports, from its pull to its settlement. Its end is reported when it
/// drops, whatever drops it.
#[derive(Debug)]
pub(super) struct Observation<'a> {
    delivering: Delivering<'a>,
    job_type: Arc<str>,
    started: Instant,
    /// Why the handler's attempt failed, when it did (not when it deferred).
    failure: Option<String>,
}

impl<'a> Observation<'a> {
    /// A delivery from `queue` starts, `redelivered` or not.
    pub(super) fn start(telemetry: &'a Telemetry, queue: &Arc<str>, redelivered: bool) -> Self {
        Self {
            delivering: telemetry.delivering(queue, redelivered),
            job_type: Arc::clone(&OTHER),
            started: Instant::now(),
            failure: None,
        }
    }

    /// The delivery's job type has `route`: it counts under the route's job type from now
    /// on (a loaded manifest's, so the label set stays bounded), whether its handler runs
    /// or it expires, is cancelled or is held back by a cap first.
    pub(super) fn counts_under(&mut self, route: &Route) {
        self.job_type = route.job_type.clone();
    }

    /// Run `handler`, timing it.
    pub(super) async fn handler(&mut self, handler: impl Future<Output = Outcome>) -> Outcome {
        let started = Instant::now();
        let output = handler.await;
        self.delivering.telemetry().emit(&Event::HandlerRan {
            job_type: &self.job_type,
            elapsed: started.elapsed(),
        });
        self.failure = match &output {
            Outcome::Failed(JobError::Deferred { .. }) | Outcome::Completed { .. } => None,
            Outcome::Failed(failure) => Some(bounded(&failure.to_string(), REASON_MAX).into()),
            Outcome::Crashed(reason) => Some(bounded(reason, REASON_MAX).into()),
            Outcome::Undecodable(reason) => Some(bounded(reason, REASON_MAX).into()),
        };
        output
    }

    /// The delivery of `job` (none when it was not an envelope) was settled as `settled`:
    /// count it in the worker's `tally` and emit it.
    pub(super) fn settled(&self, settled: &Settled, job: Option<&Envelope>, tally: &Tally) {
        tally.count(settled);
        self.delivering
            .telemetry()
            .emit(&Event::Settled(SettledJob {
                queue: self.delivering.queue(),
                series_job_type: &self.job_type,
                job: job.map(|job| JobRef {
                    job_id: job.job_id,
                    job_type: &job.job_type,
                    attempt: job.attempt,
                    schedule: job.schedule.as_deref(),
                }),
                settled,
                failure: self.failure.as_deref(),
                elapsed: self.started.elapsed(),
            }));
    }

    /// Publishing what settles the delivery failed with `err`.
    pub(super) fn publish_failed(&self, err: &BrokerError) {
        self.delivering.telemetry().emit(&Event::PublishFailed {
            queue: self.delivering.queue(),
            permanent: err.is_permanent(),
        });
    }
}
