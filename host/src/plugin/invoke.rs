//! Running one job: a fresh instance, a deadline, and an [`Outcome`] that says precisely
//! what happened.
//!
//! Per job:
//! 1. Take a job permit, so a full pool makes the job wait instead of failing; in a wide
//!    pool, a memory permit per linear memory of the plugin too.
//! 2. Create a fresh store (memory cap, deadline, log sink) and instantiate the plugin's
//!    pre-instance into it; nothing else is set up per job.
//! 3. Call `handle`, bounded twice: the epoch deadline stops a guest running wasm at its
//!    timeout, and a tokio timeout [`BACKSTOP_GRACE`] later stops one blocked in a host
//!    call (e.g. a WASI sleep), where epochs are not checked.
//! 4. Map the result: the handler's own error as it returned it, a trap to a
//!    [`Outcome::Crashed`] reason. Dropping the store frees the pool slot and flushes the
//!    job's log.

use std::borrow::Cow;
use std::time::Duration;

use jobhost_sdk::JobError;

use super::bindings::types as wit;
use super::engine::BACKSTOP_GRACE;
use super::guest_log::LogTags;
use super::load::Plugin;
use super::store::{StoreSetup, new_store, timed_out};
use super::tape::{Replayed, Tape};
use crate::job::recording::{RecordedJob, RecordedPlugin};
use crate::job::{Invocation, Outcome, Recording, now_ms};
use crate::text::{self, REASON_MAX};
use crate::trace::JobTrace;

impl Plugin {
    /// Run one job in a fresh instance, within `job.timeout` and the engine's memory cap.
    ///
    /// Never fails: every way a guest can go wrong is an [`Outcome`]. Waits while the
    /// engine's job permits are all taken. Cancel-safe: dropping the future drops the
    /// instance.
    pub async fn invoke(&self, job: Invocation<'_>) -> Outcome {
        let Some(record) = job.record else {
            return self.attempt(&job, None).await;
        };
        let recorded_at_ms = now_ms();
        let tape = Tape::record();
        let outcome = self.attempt(&job, Some(tape.clone())).await;
        if record.completed || !matches!(outcome, Outcome::Completed { .. }) {
            let plugin = RecordedPlugin {
                name: self.inner.identity.name.to_string(),
                sha256: self.inner.identity.sha256.to_string(),
            };
            let recording = tape.into_recording(
                recorded_job(&job),
                plugin,
                recorded_at_ms,
                (&outcome).into(),
            );
            record.to.keep(recording);
        }
        outcome
    }

    /// Play `recording` back in a fresh instance of this plugin, offline: every import is
    /// answered from the recording, and the first call it does not hold stops the guest
    /// (see docs/replay.md).
    pub async fn replay(&self, recording: &Recording) -> Replayed {
        let job = &recording.job;
        let job = Invocation {
            job_id: job.job_id,
            job_type: &job.job_type,
            queue: &job.queue,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            deferrals: job.deferrals,
            priority: job.priority,
            age: Duration::from_millis(job.age_ms),
            payload: job.payload.as_bytes(),
            batch: job.batch,
            trace: JobTrace::start(None),
            timeout: Duration::from_millis(job.timeout_ms),
            record: None,
        };
        let tape = Tape::play(recording);
        let outcome = self.attempt(&job, Some(tape.clone())).await;
        tape.into_replayed((&outcome).into())
    }

    async fn attempt(&self, job: &Invocation<'_>, tape: Option<Tape>) -> Outcome {
        let _permit = self
            .inner
            .engine
            .inner
            .job_permits
            .acquire()
            .await
            .expect("the job semaphore is never closed");
        let _memories = match &self.inner.engine.inner.memory_permits {
            Some(memories) => Some(
                memories
                    .acquire_many(self.inner.memories)
                    .await
                    .expect("the memory semaphore is never closed"),
            ),
            None => None,
        };
        // Boxed so that this future stays small: it holds the instance's futures, and the
        // caller boxes this one again (`Handler::invoke`), which would copy them whole.
        let run = Box::pin(self.run(job, tape));
        tokio::time::timeout(job.timeout + BACKSTOP_GRACE, run)
            .await
            .unwrap_or_else(|_| Outcome::Crashed(timed_out(job.timeout)))
    }

    async fn run(&self, job: &Invocation<'_>, tape: Option<Tape>) -> Outcome {
        let inner = &self.inner;
        let engine = &inner.engine.inner;
        let tags = LogTags::new(
            &inner.name,
            job.job_type,
            job.job_id,
            job.attempt,
            Some(job.trace),
        );
        let mut store = new_store(
            &engine.wasmtime,
            tags,
            StoreSetup {
                memory_cap: engine.config.memory_limit,
                timeout: job.timeout,
                budget: engine.config.host_calls.clone(),
                plugin: inner.identity.clone(),
                job_id: job.job_id,
                batch: job.batch,
                grants: engine.grants.current(),
                tape,
            },
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
                follow_ups: std::mem::take(&mut store.data_mut().follow_ups),
            },
            Ok(Err(error)) => handler_error(error),
            Err(err) => Outcome::Crashed(store.data().crash_reason(&err, job.timeout)),
        }
    }
}

/// The job of an attempt as its recording keeps it.
fn recorded_job(job: &Invocation<'_>) -> RecordedJob {
    RecordedJob {
        job_id: job.job_id,
        job_type: job.job_type.to_owned(),
        queue: job.queue.to_owned(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        deferrals: job.deferrals,
        priority: job.priority,
        age_ms: u64::try_from(job.age.as_millis()).unwrap_or(u64::MAX),
        timeout_ms: u64::try_from(job.timeout.as_millis()).unwrap_or(u64::MAX),
        payload: String::from_utf8_lossy(job.payload).into_owned(),
        batch: job.batch,
    }
}

/// The handler's own error, its message bounded: the worker carries it into reasons.
///
/// Unlike the imports' arguments, an export's result cannot be read in place: wasmtime
/// lifts it and then runs the guest's post-return, which frees the guest's copy. So the
/// message is copied whole, at most the guest's memory cap, and cut here at once.
fn handler_error(error: wit::JobError) -> Outcome {
    match error {
        wit::JobError::Retryable(message) => Outcome::Failed(JobError::retryable(bounded(message))),
        wit::JobError::Fatal(message) => Outcome::Failed(JobError::fatal(bounded(message))),
        wit::JobError::Deferred(deferral) => {
            let (delay, reason) = (
                Duration::from_millis(deferral.delay),
                bounded(deferral.reason),
            );
            Outcome::Failed(if deferral.retry_after {
                JobError::retry_after(delay, reason)
            } else {
                JobError::deferred_because(delay, reason)
            })
        }
        wit::JobError::Decode(message) => Outcome::Undecodable(bounded(message)),
    }
}

/// `message` as one line of at most [`REASON_MAX`] bytes, without a copy when it already is.
fn bounded(message: String) -> String {
    if let Cow::Owned(bounded) = text::bounded(&message, REASON_MAX) {
        bounded
    } else {
        message
    }
}
