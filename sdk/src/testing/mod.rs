//! Running handlers natively, under plain `cargo test`: no host, no broker, no wasm.
//!
//! [`TestContext`] is a delivery (attempt, max attempts, deferrals, job id...) to run a
//! handler against, with the configuration values the operator would give the plugin and,
//! with the feature `http`, a responder standing in for the HTTP servers it calls;
//! [`TestContext::run`] returns a [`HandlerRun`] with the handler's `Result`, the lines it
//! logged, the follow-up jobs it enqueued and the requests it sent.
//!
//! ```
//! use jobhost_sdk::prelude::*;
//! use jobhost_sdk::testing::TestContext;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! enum AppQueues {
//!     #[queue(retry(max_attempts = 3))]
//!     Work,
//! }
//!
//! #[derive(Debug, Serialize, Deserialize, Job)]
//! #[job(queue = AppQueues::Work)]
//! struct Greet { name: String }
//!
//! fn greet(job: Greet, ctx: &JobContext) -> Result<(), JobError> {
//!     if ctx.is_last_attempt() {
//!         return Err(JobError::fatal("out of patience"));
//!     }
//!     ctx.log(Level::Info, "hello", &[("name", &job.name)]);
//!     Ok(())
//! }
//!
//! let run = TestContext::new().run(greet, Greet { name: "Ada".into() });
//! assert_eq!(run.result, Ok(()));
//! assert_eq!(run.logs[0].field("name"), Some("Ada"));
//!
//! let last = TestContext::new().attempt(3).run(greet, Greet { name: "Ada".into() });
//! assert_eq!(last.result, Err(JobError::fatal("out of patience")), "3 of 3 is the last");
//! ```
//!
//! What the host does with each outcome is docs/plugin-authors.md, "Retries and backoff": `Ok`
//! acknowledges (and only then publishes the follow-ups), `Fatal` dead-letters with the
//! reason `fatal error: {error}`, `Retryable` asks the retry policy, `Deferred` comes back
//! after its delay without spending an attempt.

mod recorder;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "http")]
pub(crate) use recorder::respond;
pub(crate) use recorder::{Recorder, config_value};

use crate::guest::bindings::jobhost::plugin::types;
use crate::{Job, JobContext, JobError, Level, Queues};

/// The job id a [`TestContext`] gives its delivery unless told otherwise.
pub const TEST_JOB_ID: &str = "00000000-0000-4000-8000-000000000001";

/// A delivery to run a handler against natively. Defaults: job id [`TEST_JOB_ID`],
/// attempt 1, the max attempts of the job's effective retry policy (its own, else its
/// queue's), no deferrals, priority 0, age zero, a host that accepts every follow-up, no
/// configuration values, and no HTTP responder (every request fails as one the operator has
/// not granted). The job type and queue are always the handled job's.
#[derive(Debug, Clone)]
pub struct TestContext {
    job_id: String,
    attempt: u32,
    max_attempts: Option<u32>,
    deferrals: u32,
    priority: u8,
    age: Duration,
    refusal: Option<String>,
    in_batch: Option<String>,
    config: BTreeMap<String, String>,
    #[cfg(feature = "http")]
    responder: Option<recorder::Responder>,
}

impl Default for TestContext {
    fn default() -> Self {
        Self {
            job_id: TEST_JOB_ID.to_owned(),
            attempt: 1,
            max_attempts: None,
            deferrals: 0,
            priority: 0,
            age: Duration::ZERO,
            refusal: None,
            in_batch: None,
            config: BTreeMap::new(),
            #[cfg(feature = "http")]
            responder: None,
        }
    }
}

impl TestContext {
    /// A first delivery with every default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The job's id.
    pub fn job_id(mut self, job_id: impl Into<String>) -> Self {
        self.job_id = job_id.into();
        self
    }

    /// The 1-based attempt number.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The total attempts, instead of those of the job's effective policy.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// How many times the job has been deferred so far.
    pub fn deferrals(mut self, deferrals: u32) -> Self {
        self.deferrals = deferrals;
        self
    }

    /// The message priority.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The time since the job was first enqueued.
    pub fn age(mut self, age: Duration) -> Self {
        self.age = age;
        self
    }

    /// A host that refuses every follow-up job with `reason`, as when no plugin handles
    /// its job type.
    pub fn refuse_follow_ups(mut self, reason: impl Into<String>) -> Self {
        self.refusal = Some(reason.into());
        self
    }

    /// A job that is a member of batch `batch_id`, so `add_to_batch` is accepted.
    pub fn in_batch(mut self, batch_id: impl Into<String>) -> Self {
        self.in_batch = Some(batch_id.into());
        self
    }

    /// The configuration value or secret `key`, as the operator's `jobhost.toml` gives it
    /// (see [`crate::config`]); a key never set reads as none.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.insert(key.into(), value.into());
        self
    }

    /// Answers every HTTP request the handler sends with `responder` (see [`crate::http`]);
    /// each request is also recorded in [`HandlerRun::requests`]. A responder that returns
    /// `Err` stands for a request that got no response, such as a timeout.
    #[cfg(feature = "http")]
    pub fn respond_with(
        mut self,
        responder: impl Fn(
            &crate::http::Request,
        ) -> Result<crate::http::Response, crate::http::HttpError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.responder = Some(recorder::Responder(Arc::new(responder)));
        self
    }

    /// Runs `handler` on `job` in this delivery, recording what it logs, enqueues and
    /// sends.
    pub fn run<J: Job>(
        &self,
        handler: impl FnOnce(J, &JobContext) -> Result<(), JobError>,
        job: J,
    ) -> HandlerRun {
        let recorder = Arc::new(Recorder::answering_as(self));
        let ctx = JobContext::recorded(self.delivery::<J>(), Arc::clone(&recorder));
        let installed = Recorder::install(&recorder);
        // As the component does before handing the outcome to the host.
        let result = handler(job, &ctx).map_err(JobError::checked);
        drop(installed);
        recorder.finish(result)
    }

    fn delivery<J: Job>(&self) -> types::JobContext {
        let policy = J::retry_policy().unwrap_or_else(|| J::QUEUE.config().retry);
        types::JobContext {
            job_id: self.job_id.clone(),
            job_type: J::NAME.to_owned(),
            queue: J::QUEUE.name().to_owned(),
            attempt: self.attempt,
            max_attempts: self.max_attempts.unwrap_or(policy.max_attempts),
            deferrals: self.deferrals,
            priority: self.priority,
            age: u64::try_from(self.age.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// What a handler did in one [`TestContext::run`].
#[derive(Debug)]
#[non_exhaustive]
pub struct HandlerRun {
    /// What the handler returned; a deferral above [`crate::MAX_DELAY`] is already the
    /// fatal error the host receives.
    pub result: Result<(), JobError>,
    /// Every line logged through the context, in order.
    pub logs: Vec<LogLine>,
    /// Every follow-up job the host accepted, in order (the host publishes them only if
    /// `result` is `Ok`).
    pub follow_ups: Vec<FollowUp>,
    /// Every batch the handler enqueued, in order: `batch-1`, `batch-2`, ...
    pub batches: Vec<EnqueuedBatch>,
    /// Every job the handler added to its own batch ([`TestContext::in_batch`]), in order:
    /// `added-1`, `added-2`, ...
    pub added: Vec<FollowUp>,
    /// Every HTTP request sent, in order, each redirect followed as a request of its own.
    #[cfg(feature = "http")]
    pub requests: Vec<crate::http::Request>,
}

impl HandlerRun {
    /// The messages of every logged line, in order.
    pub fn messages(&self) -> Vec<&str> {
        self.logs.iter().map(|line| line.message.as_str()).collect()
    }

    /// The follow-ups of job type `J`, decoded.
    ///
    /// # Panics
    /// When one does not decode as `J`, which the handler's own serialization rules out.
    pub fn follow_ups_of<J: Job>(&self) -> Vec<J> {
        self.follow_ups
            .iter()
            .filter(|follow_up| follow_up.job_type == J::NAME)
            .map(|follow_up| {
                serde_json::from_value(follow_up.payload.clone()).unwrap_or_else(|e| {
                    panic!("the follow-up `{}` decodes as itself: {e}", J::NAME)
                })
            })
            .collect()
    }
}

/// One line a handler logged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogLine {
    /// Its severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// The structured fields, in order, their values as `Display` wrote them.
    pub fields: Vec<(String, String)>,
}

impl LogLine {
    /// The value of field `key`, if the line has one.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// One follow-up job a handler enqueued.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FollowUp {
    /// The id the host gave it: `follow-up-1`, `follow-up-2`, ... in a test.
    pub job_id: String,
    /// Its job type.
    pub job_type: &'static str,
    /// Its payload.
    pub payload: serde_json::Value,
    /// The delay it was enqueued with, if any.
    pub delay: Option<Duration>,
}

/// One batch a handler enqueued.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnqueuedBatch {
    /// The id the host gave it: `batch-1`, `batch-2`, ... in a test.
    pub batch_id: String,
    /// Its members, `batch-member-1`, `batch-member-2`, ...
    pub jobs: Vec<FollowUp>,
    /// The job type enqueued once every member completed.
    pub on_success: Option<&'static str>,
    /// The job type enqueued once every member ended.
    pub on_complete: Option<&'static str>,
    /// The job type enqueued at the first member dead-lettered.
    pub on_death: Option<&'static str>,
    /// What the callbacks are handed as `context`.
    pub context: Option<serde_json::Value>,
}

#[cfg(test)]
pub(crate) mod tests;
