//! [`JobContext`]: what a handler knows about its delivery and what it may ask of the host.

use std::time::Duration;

use super::bindings::jobhost::plugin::{host, types};
use super::millis;
use crate::Job;

/// The delivery a handler is running for, and its way back to the host: structured logs
/// and follow-up jobs.
///
/// Logs go to the host's tracing, tagged with the plugin, job type, job id and attempt.
/// Follow-ups are published only when the handler returns `Ok`, before the delivery is
/// acknowledged; a failed attempt publishes none of them.
#[derive(Debug)]
pub struct JobContext {
    inner: types::JobContext,
}

/// The severity of a log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// Very fine-grained detail.
    Trace,
    /// Detail for diagnosing a problem.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the job survived.
    Warn,
    /// Something failed.
    Error,
}

/// Why a follow-up job was not enqueued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The job did not serialize to JSON.
    #[error("could not encode the payload of `{job_type}`: {source}")]
    Encode {
        /// The job type of the follow-up.
        job_type: &'static str,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The host refused the job, e.g. because no plugin handles its job type.
    #[error("the host refused `{job_type}`: {reason}")]
    Refused {
        /// The job type of the follow-up.
        job_type: &'static str,
        /// The host's reason.
        reason: String,
    },
}

impl JobContext {
    pub(super) fn new(inner: types::JobContext) -> Self {
        Self { inner }
    }

    /// The job's id (UUID v4), the same across every retry and deferral.
    pub fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    /// The job type of this delivery.
    pub fn job_type(&self) -> &str {
        &self.inner.job_type
    }

    /// The queue this delivery came from.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// The 1-based attempt number; deferrals do not spend attempts.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The total attempts of the job's effective retry policy.
    pub fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    /// How many times the job has been deferred so far.
    pub fn deferrals(&self) -> u32 {
        self.inner.deferrals
    }

    /// The message priority of this delivery.
    pub fn priority(&self) -> u8 {
        self.inner.priority
    }

    /// The time since the job was first enqueued.
    pub fn age(&self) -> Duration {
        Duration::from_millis(self.inner.age)
    }

    /// Logs `message` at `level` with structured `fields`.
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        host::log(level.into(), message, &fields);
    }

    /// Logs `message` at [`Level::Debug`].
    pub fn debug(&self, message: &str) {
        self.log(Level::Debug, message, &[]);
    }

    /// Logs `message` at [`Level::Info`].
    pub fn info(&self, message: &str) {
        self.log(Level::Info, message, &[]);
    }

    /// Logs `message` at [`Level::Warn`].
    pub fn warn(&self, message: &str) {
        self.log(Level::Warn, message, &[]);
    }

    /// Logs `message` at [`Level::Error`].
    pub fn error(&self, message: &str) {
        self.log(Level::Error, message, &[]);
    }

    /// Enqueues `job` as a follow-up, delivered as soon as this handler succeeds; returns
    /// the new job's id.
    pub fn enqueue<J: Job>(&self, job: &J) -> Result<String, EnqueueError> {
        self.enqueue_with(job, None)
    }

    /// Enqueues `job` as a follow-up, delivered `delay` after this handler succeeds;
    /// returns the new job's id.
    pub fn enqueue_after<J: Job>(&self, job: &J, delay: Duration) -> Result<String, EnqueueError> {
        self.enqueue_with(job, Some(millis(delay)))
    }

    fn enqueue_with<J: Job>(&self, job: &J, delay: Option<u64>) -> Result<String, EnqueueError> {
        let payload = serde_json::to_vec(job).map_err(|source| EnqueueError::Encode {
            job_type: J::NAME,
            source,
        })?;
        host::enqueue(J::NAME, &payload, delay).map_err(|reason| EnqueueError::Refused {
            job_type: J::NAME,
            reason,
        })
    }
}

impl From<Level> for types::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => Self::Trace,
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}
