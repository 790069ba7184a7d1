//! [`JobContext`]: what a handler knows about its delivery and what it may ask of the host.

use std::fmt::Display;
use std::time::Duration;

use super::bindings::jobhost::plugin::{host, types};
use super::millis;
use crate::batch::Batch;
use crate::{Job, MAX_DELAY};

/// The delivery a handler is running for, and its way back to the host: structured logs
/// and follow-up jobs.
///
/// Logs go to the host's tracing, tagged with the plugin, job type, job id and attempt.
/// Follow-ups are published only when the handler returns `Ok`, before the delivery is
/// acknowledged; a failed attempt publishes none of them.
///
/// The host builds one for each delivery; a native test builds one with
/// [`crate::testing::TestContext`], which records the logs and follow-ups instead.
#[derive(Debug)]
pub struct JobContext {
    inner: types::JobContext,
    calls: Calls,
}

/// Where the context's logs and follow-ups go.
#[derive(Debug)]
enum Calls {
    /// The host's imports.
    Host,
    /// A native test's recorder.
    #[cfg(not(target_arch = "wasm32"))]
    Recorded(std::sync::Arc<crate::testing::Recorder>),
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
    #[error("could not encode the payload of `{job_type}`: {cause}")]
    Encode {
        /// The job type of the follow-up.
        job_type: &'static str,
        /// What serde_json said; in the message, so not also a `source()`.
        cause: serde_json::Error,
    },
    /// The host refused the job, e.g. because no plugin handles its job type.
    #[error("the host refused `{job_type}`: {reason}")]
    Refused {
        /// The job type of the follow-up.
        job_type: &'static str,
        /// The host's reason.
        reason: String,
    },
    /// The host refused a batch, or jobs added to one (this job is in no batch, a job
    /// type is not a job type, too many jobs).
    #[error("the host refused the batch: {reason}")]
    BatchRefused {
        /// The host's reason.
        reason: String,
    },
    /// The delay is longer than [`MAX_DELAY`], which no hold queue can hold; the host was
    /// not asked.
    #[error(
        "the delay of {delay:?} of a follow-up `{job_type}` exceeds the longest hold of \
         {MAX_DELAY:?}"
    )]
    DelayTooLong {
        /// The job type of the follow-up.
        job_type: &'static str,
        /// The delay asked for.
        delay: Duration,
    },
}

impl JobContext {
    /// The context of a delivery the host hands the component.
    pub(super) fn new(inner: types::JobContext) -> Self {
        Self {
            inner,
            calls: Calls::Host,
        }
    }

    /// A context whose logs and follow-ups go to `recorder`, for native tests.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn recorded(
        inner: types::JobContext,
        recorder: std::sync::Arc<crate::testing::Recorder>,
    ) -> Self {
        Self {
            inner,
            calls: Calls::Recorded(recorder),
        }
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

    /// Whether this is the last attempt of the job's retry policy: a retryable failure now
    /// dead-letters the job instead of retrying it, so a handler may e.g. log more.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt() >= self.max_attempts()
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

    /// Logs `message` at `level` with structured `fields`, each value anything `Display`:
    /// `ctx.log(Level::Info, "sent", &[("to", &email.to), ("bytes", &body.len())])`.
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &dyn Display)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.to_string()))
            .collect();
        match &self.calls {
            Calls::Host => host::log(level.into(), message, &fields),
            #[cfg(not(target_arch = "wasm32"))]
            Calls::Recorded(recorder) => recorder.log(level, message, fields),
        }
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
    ///
    /// A `delay` above [`MAX_DELAY`] is [`EnqueueError::DelayTooLong`] at once, without
    /// asking the host: no hold queue can hold the job that long.
    pub fn enqueue_after<J: Job>(&self, job: &J, delay: Duration) -> Result<String, EnqueueError> {
        if delay > MAX_DELAY {
            return Err(EnqueueError::DelayTooLong {
                job_type: J::NAME,
                delay,
            });
        }
        self.enqueue_with(job, Some(delay))
    }

    /// Enqueues `batch`'s jobs as one batch, published with the follow-ups when this
    /// handler succeeds; its callbacks fire once across the fleet (see [`crate::batch`]).
    /// Returns the batch's id.
    pub fn enqueue_batch(&self, batch: Batch) -> Result<String, EnqueueError> {
        if let Some(unencoded) = batch.unencoded {
            return Err(unencoded);
        }
        let opened = match &self.calls {
            Calls::Host => {
                let callbacks = types::BatchCallbacks {
                    on_success: batch.on_success.map(str::to_owned),
                    on_complete: batch.on_complete.map(str::to_owned),
                    on_death: batch.on_death.map(str::to_owned),
                };
                host::enqueue_batch(&owned(batch.jobs), &callbacks, batch.context.as_deref())
            }
            #[cfg(not(target_arch = "wasm32"))]
            Calls::Recorded(recorder) => recorder.enqueue_batch(batch),
        };
        opened.map_err(|reason| EnqueueError::BatchRefused { reason })
    }

    /// Adds `jobs` to the batch this job is a member of, published when this handler
    /// succeeds, so the batch ends only once they have too. Returns their ids; refused
    /// when this job is in no batch.
    pub fn add_to_batch<J: Job>(&self, jobs: &[J]) -> Result<Vec<String>, EnqueueError> {
        let jobs = jobs
            .iter()
            .map(|job| {
                let payload = serde_json::to_vec(job).map_err(|cause| EnqueueError::Encode {
                    job_type: J::NAME,
                    cause,
                })?;
                Ok((J::NAME, payload))
            })
            .collect::<Result<Vec<_>, EnqueueError>>()?;
        let added = match &self.calls {
            Calls::Host => host::add_to_batch(&owned(jobs)),
            #[cfg(not(target_arch = "wasm32"))]
            Calls::Recorded(recorder) => recorder.add_to_batch(jobs),
        };
        added.map_err(|reason| EnqueueError::BatchRefused { reason })
    }

    fn enqueue_with<J: Job>(
        &self,
        job: &J,
        delay: Option<Duration>,
    ) -> Result<String, EnqueueError> {
        let payload = serde_json::to_vec(job).map_err(|cause| EnqueueError::Encode {
            job_type: J::NAME,
            cause,
        })?;
        let enqueued = match &self.calls {
            Calls::Host => host::enqueue(J::NAME, &payload, delay.map(millis)),
            #[cfg(not(target_arch = "wasm32"))]
            Calls::Recorded(recorder) => recorder.enqueue(J::NAME, &payload, delay),
        };
        enqueued.map_err(|reason| EnqueueError::Refused {
            job_type: J::NAME,
            reason,
        })
    }
}

/// Jobs as the host's batch imports take them.
fn owned(jobs: Vec<(&'static str, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    jobs.into_iter()
        .map(|(job_type, payload)| (job_type.to_owned(), payload))
        .collect()
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
