//! Running handlers natively, under plain `cargo test`: no host, no broker, no wasm.
//!
//! [`TestContext`] is a delivery (attempt, max attempts, deferrals, job id...) to run a
//! handler against; [`TestContext::run`] returns a [`HandlerRun`] with the handler's
//! `Result`, the lines it logged and the follow-up jobs it enqueued.
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
//! What the host does with each outcome is the user's chapter "Retries and backoff": `Ok`
//! acknowledges (and only then publishes the follow-ups), `Fatal` dead-letters with the
//! reason `fatal error: {error}`, `Retryable` asks the retry policy, `Deferred` comes back
//! after its delay without spending an attempt.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::guest::bindings::jobhost::plugin::types;
use crate::{Job, JobContext, JobError, Level, Queues};

/// The job id a [`TestContext`] gives its delivery unless told otherwise.
pub const TEST_JOB_ID: &str = "00000000-0000-4000-8000-000000000001";

/// A delivery to run a handler against natively. Defaults: job id [`TEST_JOB_ID`],
/// attempt 1, the max attempts of the job's effective retry policy (its own, else its
/// queue's), no deferrals, priority 0, age zero, and a host that accepts every follow-up.
/// The job type and queue are always the handled job's.
#[derive(Debug, Clone)]
pub struct TestContext {
    job_id: String,
    attempt: u32,
    max_attempts: Option<u32>,
    deferrals: u32,
    priority: u8,
    age: Duration,
    refusal: Option<String>,
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

    /// Runs `handler` on `job` in this delivery, recording what it logs and enqueues.
    pub fn run<J: Job>(
        &self,
        handler: impl FnOnce(J, &JobContext) -> Result<(), JobError>,
        job: J,
    ) -> HandlerRun {
        let recorder = Arc::new(Recorder {
            refusal: self.refusal.clone(),
            ..Recorder::default()
        });
        let ctx = JobContext::recorded(self.delivery::<J>(), Arc::clone(&recorder));
        // As the component does before handing the outcome to the host.
        let result = handler(job, &ctx).map_err(JobError::checked);
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

/// The host side of a recorded [`JobContext`]. Behind a mutex rather than a `RefCell` so
/// that a context is `Send` and `Sync` natively as it is on wasm.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    logs: Mutex<Vec<LogLine>>,
    follow_ups: Mutex<Vec<FollowUp>>,
    refusal: Option<String>,
}

impl Recorder {
    /// What was recorded, as the run of a handler that returned `result`.
    fn finish(&self, result: Result<(), JobError>) -> HandlerRun {
        HandlerRun {
            result,
            logs: std::mem::take(&mut lock(&self.logs)),
            follow_ups: std::mem::take(&mut lock(&self.follow_ups)),
        }
    }

    pub(crate) fn log(&self, level: Level, message: &str, fields: Vec<(String, String)>) {
        lock(&self.logs).push(LogLine {
            level,
            message: message.to_owned(),
            fields,
        });
    }

    /// Accepts the follow-up unless told to refuse, as the host's `enqueue` import does.
    pub(crate) fn enqueue(
        &self,
        job_type: &'static str,
        payload: &[u8],
        delay: Option<Duration>,
    ) -> Result<String, String> {
        if let Some(reason) = &self.refusal {
            return Err(reason.clone());
        }
        let payload = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        let mut follow_ups = lock(&self.follow_ups);
        let job_id = format!("follow-up-{}", follow_ups.len() + 1);
        follow_ups.push(FollowUp {
            job_id: job_id.clone(),
            job_type,
            payload,
            delay,
        });
        Ok(job_id)
    }
}

/// The records behind `mutex`; a handler that panicked mid-push left them usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{EnqueueError, MAX_DELAY, QueueConfig, RetryPolicy};

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    struct Work;

    impl Queues for Work {
        fn all() -> &'static [Self] {
            &[Self]
        }

        fn name(&self) -> &'static str {
            "t.work"
        }

        fn config(&self) -> QueueConfig {
            QueueConfig {
                retry: RetryPolicy::exponential(4),
                ..QueueConfig::new(self.name())
            }
        }
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Task {
        delay_ms: Option<u64>,
    }

    impl Job for Task {
        const NAME: &'static str = "t.Task";
        type Queues = Work;
        const QUEUE: Work = Work;

        fn retry_policy() -> Option<RetryPolicy> {
            None
        }

        fn timeout() -> Option<Duration> {
            None
        }
    }

    /// Logs its delivery, then enqueues itself again after `delay_ms`, if any.
    fn task(job: Task, ctx: &JobContext) -> Result<(), JobError> {
        ctx.log(
            Level::Warn,
            "running",
            &[("attempt", &ctx.attempt()), ("of", &ctx.max_attempts())],
        );
        if let Some(ms) = job.delay_ms {
            let delay = Duration::from_millis(ms);
            ctx.enqueue_after(&Task { delay_ms: None }, delay)
                .map_err(|e| JobError::retryable(e.to_string()))?;
        }
        Ok(())
    }

    #[test]
    fn a_run_records_the_delivery_the_handler_saw_and_what_it_logged() {
        let run = TestContext::new()
            .attempt(2)
            .run(task, Task { delay_ms: None });
        assert_eq!(run.result, Ok(()));
        assert_eq!(
            run.logs,
            vec![LogLine {
                level: Level::Warn,
                message: "running".to_owned(),
                fields: vec![
                    ("attempt".to_owned(), "2".to_owned()),
                    ("of".to_owned(), "4".to_owned())
                ],
            }],
            "max attempts default to the queue's policy"
        );
        assert_eq!(run.messages(), ["running"]);
    }

    #[test]
    fn the_context_describes_the_delivery_as_the_builder_set_it() {
        let test = TestContext::new()
            .job_id("id-7")
            .attempt(3)
            .max_attempts(3)
            .deferrals(2)
            .priority(9)
            .age(Duration::from_secs(4));
        let run = test.run(
            |_: Task, ctx: &JobContext| {
                assert_eq!(ctx.job_id(), "id-7");
                assert_eq!((ctx.job_type(), ctx.queue()), ("t.Task", "t.work"));
                assert_eq!((ctx.attempt(), ctx.max_attempts()), (3, 3));
                assert!(ctx.is_last_attempt(), "attempt 3 of 3 is the last");
                assert_eq!((ctx.deferrals(), ctx.priority()), (2, 9));
                assert_eq!(ctx.age(), Duration::from_secs(4));
                Ok(())
            },
            Task { delay_ms: None },
        );
        assert_eq!(run.result, Ok(()));
    }

    #[test]
    fn a_recorded_context_is_send_and_sync_as_the_hosts_is() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<JobContext>();
    }

    #[test]
    fn follow_ups_are_recorded_with_their_delay_and_decode_as_their_job() {
        let run = TestContext::new().run(
            task,
            Task {
                delay_ms: Some(1500),
            },
        );
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.follow_ups.len(), 1);
        assert_eq!(run.follow_ups[0].job_id, "follow-up-1");
        assert_eq!(run.follow_ups[0].delay, Some(Duration::from_millis(1500)));
        assert_eq!(run.follow_ups_of::<Task>(), [Task { delay_ms: None }]);
    }

    #[test]
    fn a_refusing_host_makes_enqueue_fail_with_its_reason() {
        let run = TestContext::new()
            .refuse_follow_ups("no plugin handles `t.Task`")
            .run(task, Task { delay_ms: Some(1) });
        assert_eq!(
            run.result,
            Err(JobError::retryable(
                "the host refused `t.Task`: no plugin handles `t.Task`"
            ))
        );
        assert!(run.follow_ups.is_empty());
    }

    #[test]
    fn a_follow_up_delayed_beyond_the_longest_hold_is_refused_without_asking_the_host() {
        let too_long = MAX_DELAY + Duration::from_millis(1);
        let run = TestContext::new().run(
            |_: Task, ctx: &JobContext| {
                let err = ctx
                    .enqueue_after(&Task { delay_ms: None }, too_long)
                    .expect_err("no hold queue holds a job that long");
                assert!(
                    matches!(err, EnqueueError::DelayTooLong { delay, .. } if delay == too_long)
                );
                assert_eq!(
                    err.to_string(),
                    "the delay of 2147483.648s of a follow-up `t.Task` exceeds the longest \
                     hold of 2147483.647s"
                );
                Ok(())
            },
            Task { delay_ms: None },
        );
        assert_eq!(run.result, Ok(()));
        assert!(run.follow_ups.is_empty(), "the host was never asked");
        let at_the_limit = TestContext::new().run(
            task,
            Task {
                delay_ms: Some(u64::try_from(MAX_DELAY.as_millis()).expect("fits")),
            },
        );
        assert_eq!(
            at_the_limit.follow_ups.len(),
            1,
            "the limit itself is accepted"
        );
    }

    #[test]
    fn a_deferral_built_by_hand_beyond_the_longest_hold_is_the_fatal_error_the_host_gets() {
        let run = TestContext::new().run(
            |_: Task, _: &JobContext| {
                Err(JobError::Deferred {
                    delay: Duration::MAX,
                    reason: "forever".to_owned(),
                })
            },
            Task { delay_ms: None },
        );
        assert!(
            matches!(&run.result, Err(JobError::Fatal(msg)) if msg.contains("exceeds the longest hold")),
            "{:?}",
            run.result
        );
    }
}
