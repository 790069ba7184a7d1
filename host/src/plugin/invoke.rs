//! Running one job: a fresh instance, a deadline, and an [`Outcome`] that says precisely
//! what happened.
//!
//! Per job:
//! 1. Take a job permit, so a full pool makes the job wait instead of failing.
//! 2. Create a fresh store (memory cap, deadline, log sink) and instantiate the plugin's
//!    pre-instance into it; nothing else is set up per job.
//! 3. Call `handle`, bounded twice: the epoch deadline stops a guest running wasm at its
//!    timeout, and a tokio timeout [`BACKSTOP_GRACE`] later stops one blocked in a host
//!    call (e.g. a WASI sleep), where epochs are not checked.
//! 4. Map the result: the handler's own error as it returned it, a trap to a
//!    [`Outcome::Crashed`] reason. Dropping the store frees the pool slot and flushes the
//!    job's log.

use std::time::Duration;

use jobhost_sdk::JobError;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::bindings::types as wit;
use super::engine::EPOCH_TICK;
use super::guest_log::LogTags;
use super::load::Plugin;
use super::store::{new_store, timed_out};

/// How long after a job's timeout the tokio timeout backs up the epoch deadline: a few
/// ticks, so a running guest is always stopped by the deadline, as a trap.
const BACKSTOP_GRACE: Duration = EPOCH_TICK.saturating_mul(5);

/// One delivery to run.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// UUID v4, the same across retries.
    pub job_id: Uuid,
    /// The job type, one of the plugin's.
    pub job_type: &'a str,
    /// The work queue the job came from.
    pub queue: &'a str,
    /// 1-based attempt number of this delivery.
    pub attempt: u32,
    /// The effective policy's total attempts.
    pub max_attempts: u32,
    /// How many times the job has been deferred.
    pub deferrals: u32,
    /// The delivery's broker priority.
    pub priority: u8,
    /// Time since the job was first enqueued.
    pub age: Duration,
    /// The job's JSON.
    pub payload: &'a [u8],
    /// How long this attempt may run: the job's timeout, else the queue's, else the
    /// engine's default.
    pub timeout: Duration,
}

/// What became of one attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler returned successfully. The worker publishes `follow_ups` before it
    /// acknowledges the delivery; a failed attempt's follow-ups are discarded.
    Completed {
        /// The jobs the handler enqueued, in order.
        follow_ups: Vec<FollowUp>,
    },
    /// The handler returned an error: retryable, fatal or deferred, as it chose.
    Failed(JobError),
    /// The guest could not decode the payload into the job type: `decode error: {0}`,
    /// dead-lettered without retries.
    Undecodable(String),
    /// The guest did not return: a trap, a panic (its message), a timeout
    /// (`job timed out after 2s`) or the memory cap (`memory limit of 128 MiB exceeded`).
    /// Counts as a retryable failure.
    Crashed(String),
}

/// A job enqueued by a handler, published only if the handler completes.
#[derive(Debug, Clone)]
pub struct FollowUp {
    /// The new job's id, already returned to the guest.
    pub job_id: Uuid,
    /// Its job type, not checked against loaded plugins: the worker routes it.
    pub job_type: String,
    /// Its JSON payload, validated.
    pub payload: Box<RawValue>,
    /// How long to hold it before its first delivery.
    pub delay: Option<Duration>,
}

impl Plugin {
    /// Run one job in a fresh instance, within `job.timeout` and the engine's memory cap.
    ///
    /// Never fails: every way a guest can go wrong is an [`Outcome`]. Waits while the
    /// engine's job permits are all taken. Cancel-safe: dropping the future drops the
    /// instance.
    pub async fn invoke(&self, job: Invocation<'_>) -> Outcome {
        let _permit = self
            .inner
            .engine
            .inner
            .job_permits
            .acquire()
            .await
            .expect("the job semaphore is never closed");
        tokio::time::timeout(job.timeout + BACKSTOP_GRACE, self.run(&job))
            .await
            .unwrap_or_else(|_| Outcome::Crashed(timed_out(job.timeout)))
    }

    async fn run(&self, job: &Invocation<'_>) -> Outcome {
        let inner = &self.inner;
        let engine = &inner.engine.inner;
        let tags = LogTags {
            plugin: inner.name.clone(),
            job_type: job.job_type.to_owned(),
            job_id: job.job_id,
            attempt: job.attempt,
        };
        let mut store = new_store(
            &engine.wasmtime,
            tags,
            engine.config.memory_limit,
            job.timeout,
        );
        let context = wit::JobContext {
            job_id: job.job_id.to_string(),
            job_type: job.job_type.to_owned(),
            queue: job.queue.to_owned(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            deferrals: job.deferrals,
            priority: job.priority,
            age: u64::try_from(job.age.as_millis()).unwrap_or(u64::MAX),
        };
        let result = async {
            let instance = inner.pre.instantiate_async(&mut store).await?;
            instance
                .jobhost_plugin_handler()
                .call_handle(&mut store, &context, job.payload)
                .await
        }
        .await;
        match result {
            Ok(Ok(())) => Outcome::Completed {
                follow_ups: std::mem::take(&mut store.data_mut().follow_ups.jobs),
            },
            Ok(Err(error)) => handler_error(error),
            Err(err) => Outcome::Crashed(store.data().crash_reason(&err, job.timeout)),
        }
    }
}

fn handler_error(error: wit::JobError) -> Outcome {
    match error {
        wit::JobError::Retryable(message) => Outcome::Failed(JobError::retryable(message)),
        wit::JobError::Fatal(message) => Outcome::Failed(JobError::fatal(message)),
        wit::JobError::Deferred(deferral) => Outcome::Failed(JobError::deferred_because(
            Duration::from_millis(deferral.delay),
            deferral.reason,
        )),
        wit::JobError::Decode(message) => Outcome::Undecodable(message),
    }
}
