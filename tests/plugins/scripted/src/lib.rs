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

use std::time::Duration;

use jobhost_sdk::{Backoff, Job, JobContext, JobError, QueueConfig, Queues, RetryPolicy};
use serde::{Deserialize, Serialize};

/// The queues, one per retry shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TestQueues {
    /// `test.emails`: 3 attempts, exponential 1s..2m, no jitter.
    Emails,
    /// `test.bare`: no policy.
    Bare,
    /// `test.jittered`: 5 attempts, default exponential (with jitter).
    Jittered,
    /// `test.urgent`: max priority 5, 3 attempts, fixed 2s.
    Urgent,
}

impl Queues for TestQueues {
    fn all() -> &'static [Self] {
        &[Self::Emails, Self::Bare, Self::Jittered, Self::Urgent]
    }
    fn name(&self) -> &'static str {
        match self {
            Self::Emails => "test.emails",
            Self::Bare => "test.bare",
            Self::Jittered => "test.jittered",
            Self::Urgent => "test.urgent",
        }
    }
    fn config(&self) -> QueueConfig {
        let mut config = QueueConfig::new(self.name());
        match self {
            Self::Emails => {
                config.retry = RetryPolicy::new(
                    3,
                    Backoff::Exponential {
                        base: Duration::from_secs(1),
                        factor: 2.0,
                        max: Duration::from_secs(120),
                        jitter: false,
                    },
                );
            }
            Self::Bare => {}
            Self::Jittered => config.retry = RetryPolicy::exponential(5),
            Self::Urgent => {
                config.max_priority = 5;
                config.retry = RetryPolicy::fixed(3, Duration::from_secs(2));
            }
        }
        config
    }
}

/// What a scripted handler does, in this order: defer while `ctx.deferrals < defer_times`,
/// then fail with `failure` while `ctx.attempt <= fail_times`, then succeed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Script {
    /// Names the job in logs, so tests can find its calls.
    pub key: String,
    /// How many attempts fail.
    #[serde(default)]
    pub fail_times: u32,
    /// How those attempts fail.
    #[serde(default)]
    pub failure: Failure,
    /// The failure's message (the panic message for [`Failure::Panic`]).
    #[serde(default = "Script::default_message")]
    pub message: String,
    /// How many deliveries defer before any attempt runs.
    #[serde(default)]
    pub defer_times: u32,
    /// The delay of each deferral, in milliseconds.
    #[serde(default = "Script::default_defer_ms")]
    pub defer_ms: u64,
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
pub enum Failure {
    /// [`JobError::Retryable`].
    #[default]
    Retryable,
    /// [`JobError::Fatal`].
    Fatal,
    /// A guest panic.
    Panic,
}

macro_rules! scripted_jobs {
    ($($job:ident: $name:literal on $queue:ident, retry $retry:expr;)+) => {$(
        #[doc = concat!("`", $name, "`: runs its script.")]
        #[derive(Debug, Serialize, Deserialize)]
        pub struct $job(pub Script);

        impl Job for $job {
            const NAME: &'static str = $name;
            type Queues = TestQueues;
            const QUEUE: TestQueues = TestQueues::$queue;
            fn retry_policy() -> Option<RetryPolicy> {
                $retry
            }
            fn timeout() -> Option<Duration> {
                None
            }
        }

        impl From<$job> for Script {
            fn from(job: $job) -> Self {
                job.0
            }
        }
    )+};
}

scripted_jobs! {
    SendEmail: "scripted.SendEmail" on Emails, retry None;
    PatientEmail: "scripted.PatientEmail" on Emails,
        retry Some(RetryPolicy::fixed(5, Duration::from_secs(3)));
    HastyEmail: "scripted.HastyEmail" on Emails, retry Some(RetryPolicy::new(2, Backoff::None));
    BareJob: "scripted.BareJob" on Bare, retry None;
    BareJobWithRetry: "scripted.BareJobWithRetry" on Bare,
        retry Some(RetryPolicy::fixed(3, Duration::from_secs(5)));
    JitteredJob: "scripted.JitteredJob" on Jittered, retry None;
    UrgentJob: "scripted.UrgentJob" on Urgent, retry None;
}

/// Runs the job's script.
fn run<J: Into<Script>>(job: J, ctx: &JobContext) -> Result<(), JobError> {
    let script = job.into();
    let attempt = ctx.attempt().to_string();
    let deferrals = ctx.deferrals().to_string();
    ctx.log(
        jobhost_sdk::Level::Info,
        "scripted call",
        &[
            ("key", &script.key),
            ("attempt", &attempt),
            ("deferrals", &deferrals),
        ],
    );
    if ctx.deferrals() < script.defer_times {
        return Err(JobError::deferred_msg(
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
});
