//! One delivery to run, and what became of it.

use std::time::Duration;

use jobhost_sdk::JobError;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::Recorder;
use super::batch::SharedJoins;
use crate::trace::JobTrace;

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
    /// The batch the job is a member of, if any: where `add-to-batch` adds.
    pub batch: Option<Uuid>,
    /// The attempt's span: its trace, its own id and its parent; the guest's log lines
    /// carry the first two.
    pub trace: JobTrace,
    /// How long this attempt may run: the job's timeout, else the queue's, else the
    /// engine's default.
    pub timeout: Duration,
    /// Whether to record this attempt, and where to keep the recording; none records
    /// nothing (docs/replay.md).
    pub record: Option<Record<'a>>,
}

/// Where an attempt's recording goes, and which attempts keep one.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Where the recording is kept.
    pub to: &'a dyn Recorder,
    /// Whether a completed attempt keeps its recording too; one that does not complete
    /// always does.
    pub completed: bool,
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
    /// The batch it joins, if the handler enqueued it into one.
    pub batch: Option<SharedJoins>,
}
