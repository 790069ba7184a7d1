//! Test plugin for the worker tests: every job runs the [`Script`] in its payload, on queues
//! (prefix `test`) of every retry shape.
//!
//! | job type | queue | own policy |
//! |---|---|---|
//! | `scripted.SendEmail` | `test.emails`: 3 attempts, exponential 1s..2m, no jitter | none |
//! | `scripted.PatientEmail` | `test.emails` | 5 attempts, fixed 3s |
//! | `scripted.HastyEmail` | `test.emails` | 2 attempts, no backoff |
//! | `scripted.BareJob` | `test.bare`: no policy | none |
//! | `scripted.BareJobWithRetry` | `test.bare` | 3 attempts, fixed 5s |
//! | `scripted.JitteredJob` | `test.jittered`: 5 attempts, default exponential | none |
//! | `scripted.UrgentJob` | `test.urgent`: max priority 5, 3 attempts, fixed 2s | none |
//! | `scripted.LimitedJob` | `test.bare` | none; 2 at once, 100/s and unique per `key`, declared |

use std::time::{Duration, Instant};

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues};
use serde::{Deserialize, Serialize};

/// The queues, one per retry shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum TestQueues {
    #[queue(retry(
        max_attempts = 3,
        backoff = "exponential",
        base = "1s",
        max = "2m",
        jitter = false
    ))]
    Emails,
    Bare,
    #[queue(retry(max_attempts = 5))]
    Jittered,
    #[queue(
        max_priority = 5,
        retry(max_attempts = 3, backoff = "fixed", delay = "2s")
    )]
    Urgent,
}

/// What a scripted handler does, in this order: keep the CPU busy for `busy_ms`, defer
/// while `ctx.deferrals < defer_times`, then fail with `failure` while
/// `ctx.attempt <= fail_times`, then succeed, enqueueing a `scripted.BareJob` keyed
/// `{key}.follow-up` after `follow_up_after_ms` when that is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Script {
    /// Names the job in logs, so tests can find its calls.
    key: String,
    /// How many attempts fail.
    #[serde(default)]
    fail_times: u32,
    /// How those attempts fail.
    #[serde(default)]
    failure: Failure,
    /// The failure's message (the panic message for [`Failure::Panic`]).
    #[serde(default = "Script::default_message")]
    message: String,
    /// How many deliveries defer before any attempt runs.
    #[serde(default)]
    defer_times: u32,
    /// The delay of each deferral, in milliseconds.
    #[serde(default = "Script::default_defer_ms")]
    defer_ms: u64,
    /// Enqueue a follow-up on success, held this long (so a test can find it in the hold
    /// queue before any worker runs it).
    #[serde(default)]
    follow_up_after_ms: Option<u64>,
    /// Keep the CPU busy this long first, without yielding, as a CPU-heavy job does.
    #[serde(default)]
    busy_ms: u64,
}

impl Script {
    fn default_message() -> String {
        "service is down".to_owned()
    }

    const fn default_defer_ms() -> u64 {
        1000
    }
}

/// How a scripted attempt fails.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Failure {
    /// [`JobError::Retryable`].
    #[default]
    Retryable,
    /// [`JobError::Fatal`].
    Fatal,
    /// A guest panic.
    Panic,
}

/// `scripted.SendEmail`: the queue's policy.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "scripted.SendEmail", queue = TestQueues::Emails)]
struct SendEmail(Script);

/// `scripted.PatientEmail`: more attempts than its queue, with a fixed wait.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "scripted.PatientEmail",
    queue = TestQueues::Emails,
    retry(max_attempts = 5, backoff = "fixed", delay = "3s")
)]
struct PatientEmail(Script);

/// `scripted.HastyEmail`: fewer attempts than its queue, without waits.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "scripted.HastyEmail",
    queue = TestQueues::Emails,
    retry(max_attempts = 2, backoff = "none")
)]
struct HastyEmail(Script);

/// `scripted.BareJob`: no policy anywhere, so one attempt.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "scripted.BareJob", queue = TestQueues::Bare)]
struct BareJob(Script);

/// `scripted.BareJobWithRetry`: a policy of its own on a queue without one.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "scripted.BareJobWithRetry",
    queue = TestQueues::Bare,
    retry(max_attempts = 3, backoff = "fixed", delay = "5s")
)]
struct BareJobWithRetry(Script);

/// `scripted.JitteredJob`: the queue's default exponential policy, jitter included.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "scripted.JitteredJob", queue = TestQueues::Jittered)]
struct JitteredJob(Script);

/// `scripted.UrgentJob`: on a queue with priorities.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "scripted.UrgentJob", queue = TestQueues::Urgent)]
struct UrgentJob(Script);

/// `scripted.LimitedJob`: fleet-wide limits per value of its script's `key`, declared here
/// (the operator's grants file may override them).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "scripted.LimitedJob",
    queue = TestQueues::Bare,
    concurrency(key = "key", limit = 2),
    rate(key = "key", limit = "100/s", burst = 10),
    unique(key = "key", for = "10m")
)]
struct LimitedJob(Script);

/// Every job above is its [`Script`].
macro_rules! scripts {
    ($($job:ident),+) => {$(
        impl From<$job> for Script {
            fn from(job: $job) -> Self {
                job.0
            }
        }
    )+};
}

scripts!(
    SendEmail,
    PatientEmail,
    HastyEmail,
    BareJob,
    BareJobWithRetry,
    JitteredJob,
    UrgentJob,
    LimitedJob
);

/// Runs the job's script.
fn run<J: Into<Script>>(job: J, ctx: &JobContext) -> Result<(), JobError> {
    let script = job.into();
    let attempt = ctx.attempt().to_string();
    let deferrals = ctx.deferrals().to_string();
    ctx.log(
        Level::Info,
        "scripted call",
        &[
            ("key", &script.key),
            ("attempt", &attempt),
            ("deferrals", &deferrals),
        ],
    );
    let busy = Instant::now();
    while busy.elapsed() < Duration::from_millis(script.busy_ms) {
        std::hint::black_box(&busy);
    }
    if ctx.deferrals() < script.defer_times {
        return Err(JobError::deferred_because(
            Duration::from_millis(script.defer_ms),
            "deferred by script",
        ));
    }
    if ctx.attempt() <= script.fail_times {
        return match script.failure {
            Failure::Retryable => Err(JobError::retryable(script.message)),
            Failure::Fatal => Err(JobError::fatal(script.message)),
            Failure::Panic => panic!("{}", script.message),
        };
    }
    if let Some(delay) = script.follow_up_after_ms {
        let follow_up = BareJob(Script {
            key: format!("{}.follow-up", script.key),
            fail_times: 0,
            failure: Failure::Retryable,
            message: Script::default_message(),
            defer_times: 0,
            defer_ms: Script::default_defer_ms(),
            follow_up_after_ms: None,
            busy_ms: 0,
        });
        ctx.enqueue_after(&follow_up, Duration::from_millis(delay))
            .map_err(|err| JobError::fatal(err.to_string()))?;
    }
    Ok(())
}

jobhost_sdk::plugin!(queues = TestQueues, jobs = {
    SendEmail => run,
    PatientEmail => run,
    HastyEmail => run,
    BareJob => run,
    BareJobWithRetry => run,
    JitteredJob => run,
    UrgentJob => run,
    LimitedJob => run,
});
