//! How each firing's job ended: an observer of the worker's settlements that records, for
//! a job a schedule's tick enqueued (its envelope names the schedule), its outcome beside
//! the firing once it is settled for good, so `jobhost schedules` shows what became of each
//! firing whichever host ran it.
//!
//! # Contract
//! - Only a final settlement is recorded: completed, dead-lettered, expired or cancelled; a
//!   retry or a deferral is not an ending.
//! - The schedule's name is the envelope's, which a producer could write: only a schedule
//!   in force ([`in_force`](super::in_force)) whose job type is the job's is recorded, so a
//!   forged name makes no queue on the broker, and a real one's history stays bounded.
//! - Recording runs on a task of its own, so a settlement never waits on it; one that
//!   fails is logged at debug and the firing shows no ending.

use tracing::debug;

use crate::broker::{Ended, Schedules};
use crate::grants::SharedGrants;
use crate::job::Settled;
use crate::telemetry::{Event, Observer};
use crate::worker::Plugins;

/// Records the endings of scheduled jobs through `backend`, as settled by this host.
#[derive(Debug)]
pub struct Endings<B> {
    backend: B,
    grants: SharedGrants,
    plugins: Plugins,
    host: String,
}

impl<B: Schedules + Clone> Endings<B> {
    /// Endings recorded through `backend` of the schedules in force by `grants` and
    /// `plugins`, said to be settled by this host.
    pub fn new(backend: B, grants: SharedGrants, plugins: Plugins) -> Self {
        Self {
            backend,
            grants,
            plugins,
            host: super::this_host(),
        }
    }

    /// Whether `name` is a schedule in force that fires `job_type`.
    fn fires(&self, name: &str, job_type: &str) -> bool {
        super::in_force(&self.grants.current(), &self.plugins.current())
            .iter()
            .any(|s| s.name == name && s.schedule.job_type == job_type)
    }
}

impl<B: Schedules + Clone> Observer for Endings<B> {
    fn observe(&self, event: &Event<'_>) {
        let Event::Settled(settled) = event else {
            return;
        };
        let Some(job) = &settled.job else { return };
        let Some(schedule) = job.schedule else { return };
        let outcome = match settled.settled {
            Settled::Completed => "completed",
            Settled::DeadLettered(_) => "dead-lettered",
            Settled::Expired(_) => "expired",
            Settled::Cancelled(_) => "cancelled",
            Settled::Retried | Settled::Deferred | Settled::Throttled(_) => return,
        };
        if !self.fires(schedule, job.job_type) {
            return;
        }
        let ended = Ended {
            job_id: job.job_id,
            outcome: outcome.to_owned(),
            attempt: job.attempt,
            at_ms: super::Clock::System.now_ms(),
            host: self.host.clone(),
        };
        let (backend, schedule) = (self.backend.clone(), schedule.to_owned());
        tokio::spawn(async move {
            if let Err(error) = backend.record_end(&schedule, &ended).await {
                debug!(%schedule, %error, "how a scheduled job ended was not recorded");
            }
        });
    }
}
