//! Placeholder of the plugin layer's public types; replaced by the wasmtime layer.

use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::value::RawValue;
use uuid::Uuid;

/// What a plugin serves.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Plugin name.
    pub name: String,
    /// Its queues.
    pub queues: Vec<QueueConfig>,
    /// Its jobs.
    pub jobs: Vec<JobSpec>,
}

/// A job type.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Job type name.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Its own policy.
    pub retry: Option<RetryPolicy>,
    /// Its own timeout.
    pub timeout: Option<Duration>,
}

/// One delivery to run.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// Job id.
    pub job_id: Uuid,
    /// Job type.
    pub job_type: &'a str,
    /// Queue.
    pub queue: &'a str,
    /// Attempt.
    pub attempt: u32,
    /// Max attempts.
    pub max_attempts: u32,
    /// Deferrals.
    pub deferrals: u32,
    /// Priority.
    pub priority: u8,
    /// Age.
    pub age: Duration,
    /// Payload JSON.
    pub payload: &'a [u8],
    /// Timeout.
    pub timeout: Duration,
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// Ok.
    Completed {
        /// Follow-ups.
        follow_ups: Vec<FollowUp>,
    },
    /// Handler error.
    Failed(JobError),
    /// Payload did not decode.
    Undecodable(String),
    /// Trap, panic, timeout.
    Crashed(String),
}

/// A follow-up job.
#[derive(Debug)]
pub struct FollowUp {
    /// Its id.
    pub job_id: Uuid,
    /// Its type.
    pub job_type: String,
    /// Its payload.
    pub payload: Box<RawValue>,
    /// Its delay.
    pub delay: Option<Duration>,
}
