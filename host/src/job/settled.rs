//! How a delivery was settled: one typed value, produced once by the worker and handed, as
//! [`Event::Settled`](crate::telemetry::Event::Settled), to whoever watches the host (see
//! [`crate::telemetry`] for who does and what each makes of it).
//!
//! # Contract
//! - [`Settled`] is the whole story of a settlement: completed, retried, deferred, expired
//!   (see [`Expired`]), throttled by a [`Throttle`], dead-lettered with a [`DeadCause`], or
//!   cancelled by an operator (its message in the dead-letter queue too, with who and when).
//!   Observers match on it; a new variant is a compile error in each of them until it is
//!   mapped.
//! - A delivery counts under its route's job type, or under [`OTHER_JOB_TYPE`] when no
//!   route was found for it, so a producer's made-up job types cannot grow a label set.
//! - An expired job goes to the dead-letter queue too, where an operator looks, but it is
//!   not a failure: it counts as `expired`, not under `jobhost_dead_letters_total`.
//! - A dead letter's reason (the `x-death-reason` header, the log line, the dashboard) is
//!   rendered from its cause by `Display`, never parsed back into one: the metrics label is
//!   [`DeadCause::label`], so rewording a reason cannot move its dead letters to another
//!   series.
//! - The reason texts are the ones `queuey` writes where both write one (`max attempts`,
//!   `fatal error`, `decode error`, `no handler`, `malformed envelope`), so tools that read
//!   either host's dead letters keep working.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Cancellation, DelayTooLong, Expired};

/// The job type a delivery counts under when no loaded manifest declares its job type, or
/// it was dead-lettered before its route was found (not an envelope, a payload too large,
/// a poison message).
pub const OTHER_JOB_TYPE: &str = "other";

/// One settled delivery, as its observers see it.
#[derive(Debug, Clone, Copy)]
pub struct SettledJob<'a> {
    /// The queue it came from.
    pub queue: &'a Arc<str>,
    /// The job type it counts under: its route's, or [`OTHER_JOB_TYPE`] when no route was
    /// found for it.
    pub series_job_type: &'a Arc<str>,
    /// The job, when the message was an envelope.
    pub job: Option<JobRef<'a>>,
    /// How it was settled.
    pub settled: &'a Settled,
    /// Why the handler's attempt failed, bounded, when it failed (not when it deferred).
    pub failure: Option<&'a str>,
    /// From its pull to its settlement.
    pub elapsed: Duration,
}

/// Which job a settlement was of.
#[derive(Debug, Clone, Copy)]
pub struct JobRef<'a> {
    /// Its id, the same across retries.
    pub job_id: Uuid,
    /// Its job type as the envelope names it (not bounded).
    pub job_type: &'a str,
    /// The attempt that was settled.
    pub attempt: u32,
    /// The schedule whose tick enqueued it, as its envelope says (unchecked).
    pub schedule: Option<&'a str>,
}

/// How one delivery was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The handler completed; its follow-ups were published, then the delivery acked.
    Completed,
    /// The attempt failed and the policy allowed another: the job waits in a hold queue.
    Retried,
    /// The handler deferred the job: it waits in a hold queue without spending an attempt.
    Deferred,
    /// The job's deadline passed before it was delivered, or would pass before its retry
    /// or deferral came back: it did not run (again), and its message is in the
    /// dead-letter queue of the queue it came from, with the expiry as its reason.
    Expired(Expired),
    /// The message is in the dead-letter queue of the queue it came from, for `cause`.
    DeadLettered(DeadCause),
    /// An operator cancelled the job: it did not run, or its attempt was interrupted, and
    /// its message is in the dead-letter queue with the [`Cancellation`] as its reason.
    Cancelled(Cancellation),
    /// The job did not run, held back by a limit of the fleet: it waits in a hold queue
    /// without spending an attempt.
    Throttled(Throttle),
}

/// Which limit held a job back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Throttle {
    /// Its queue's or its key's concurrency cap had no permit free.
    Concurrency,
    /// Its queue's or its key's rate limit had no token due.
    Rate,
}

impl Throttle {
    /// The `reason` label of `jobhost_jobs_throttled_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Concurrency => "concurrency",
            Self::Rate => "rate",
        }
    }
}

impl Settled {
    /// The `outcome` label of `jobhost_jobs_total` and the dashboard's name for it.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Retried => "retried",
            Self::Deferred => "deferred",
            Self::Expired(_) => "expired",
            Self::DeadLettered(_) => "dead_lettered",
            Self::Cancelled(_) => "cancelled",
            Self::Throttled(_) => "throttled",
        }
    }

    /// The limit, when the job was throttled.
    pub fn throttle(&self) -> Option<Throttle> {
        match self {
            Self::Throttled(throttle) => Some(*throttle),
            Self::Completed
            | Self::Retried
            | Self::Deferred
            | Self::Expired(_)
            | Self::DeadLettered(_)
            | Self::Cancelled(_) => None,
        }
    }

    /// The cause, when the delivery was dead-lettered.
    pub fn dead_cause(&self) -> Option<&DeadCause> {
        match self {
            Self::DeadLettered(cause) => Some(cause),
            Self::Completed
            | Self::Retried
            | Self::Deferred
            | Self::Expired(_)
            | Self::Cancelled(_)
            | Self::Throttled(_) => None,
        }
    }
}

/// Why a message was dead-lettered. `Display` renders the reason the dead letter carries;
/// the strings inside are what a producer or a guest wrote, so whoever puts a reason on
/// the wire or in a log bounds it (`text::bounded`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadCause {
    /// The retry policy gave up after `attempt` of `max` attempts; `failure` is the last
    /// attempt's error as the handler's `JobError` renders it.
    MaxAttempts {
        /// The policy's total attempts.
        max: u32,
        /// The attempt that failed last.
        attempt: u32,
        /// Why it failed.
        failure: String,
    },
    /// The handler failed fatally; `failure` is the rendered `JobError::Fatal`.
    Fatal(String),
    /// The guest could not decode the payload into its job type.
    Decode(String),
    /// No loaded plugin serves the job type.
    NoHandler {
        /// The job type the message names.
        job_type: String,
    },
    /// The message is not an envelope.
    Malformed,
    /// The payload is above the worker's limit.
    PayloadTooLarge {
        /// The payload's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The message failed to settle too often: it was delivered `deliveries` times.
    Poison {
        /// How many times it was delivered without being settled.
        deliveries: u32,
    },
    /// Its retry, deferral or follow-up could never be published.
    PublishFailed {
        /// What could not be published (`retry`, `deferral`, `a follow-up job`).
        what: &'static str,
        /// The broker's answer.
        error: String,
    },
    /// A delay longer than a hold queue can hold: of a retry, a deferral or a follow-up.
    DelayTooLong {
        /// Whose delay it was.
        of: Delayed,
        /// The delay and the limit.
        too_long: DelayTooLong,
    },
}

/// Whose delay was too long to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delayed {
    /// The retry of an attempt that failed with this error.
    Retry {
        /// Why the attempt failed.
        failure: String,
    },
    /// The handler's deferral.
    Deferral,
    /// A follow-up job the handler enqueued with a delay.
    FollowUp,
}

impl DeadCause {
    /// The `cause` label of `jobhost_dead_letters_total`: a closed set.
    pub fn label(&self) -> &'static str {
        match self {
            Self::MaxAttempts { .. } => "max_attempts",
            Self::Fatal(_) => "fatal",
            Self::Decode(_) => "decode",
            Self::NoHandler { .. } => "no_handler",
            Self::Malformed => "malformed",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::Poison { .. } => "poison",
            Self::PublishFailed { .. } => "publish_failed",
            Self::DelayTooLong { .. } => "delay_too_long",
        }
    }
}

impl fmt::Display for DeadCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxAttempts {
                max,
                attempt,
                failure,
            } => write!(
                f,
                "max attempts ({max}) exhausted after attempt {attempt}: {failure}"
            ),
            Self::Fatal(failure) => write!(f, "fatal error: {failure}"),
            Self::Decode(error) => write!(f, "decode error: {error}"),
            Self::NoHandler { job_type } => write!(f, "no handler for job type `{job_type}`"),
            Self::Malformed => f.write_str("malformed envelope"),
            Self::PayloadTooLarge { size, limit } => write!(
                f,
                "payload too large: {size} bytes, the limit is {limit} bytes"
            ),
            Self::Poison { deliveries } => write!(
                f,
                "poison message: delivered {deliveries} times without being settled"
            ),
            Self::PublishFailed { what, error } => {
                write!(f, "{what} could not be published: {error}")
            }
            Self::DelayTooLong { of, too_long } => match of {
                Delayed::Retry { failure } => write!(
                    f,
                    "cannot retry the job: {too_long}; it failed with: {failure}"
                ),
                Delayed::Deferral => write!(f, "cannot defer the job: {too_long}"),
                Delayed::FollowUp => write!(f, "cannot enqueue a follow-up job: {too_long}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn too_long() -> DelayTooLong {
        DelayTooLong {
            delay: Duration::from_secs(3_000_000),
        }
    }

    #[test]
    fn every_cause_renders_its_reason_and_has_its_own_label() {
        let cases = [
            (
                DeadCause::MaxAttempts {
                    max: 3,
                    attempt: 3,
                    failure: "job failed (retryable): boom".into(),
                },
                "max attempts (3) exhausted after attempt 3: job failed (retryable): boom",
                "max_attempts",
            ),
            (
                DeadCause::Fatal("job failed (fatal): bad".into()),
                "fatal error: job failed (fatal): bad",
                "fatal",
            ),
            (
                DeadCause::Decode("missing field".into()),
                "decode error: missing field",
                "decode",
            ),
            (
                DeadCause::NoHandler {
                    job_type: "x".into(),
                },
                "no handler for job type `x`",
                "no_handler",
            ),
            (DeadCause::Malformed, "malformed envelope", "malformed"),
            (
                DeadCause::PayloadTooLarge { size: 9, limit: 8 },
                "payload too large: 9 bytes, the limit is 8 bytes",
                "payload_too_large",
            ),
            (
                DeadCause::Poison { deliveries: 6 },
                "poison message: delivered 6 times without being settled",
                "poison",
            ),
            (
                DeadCause::PublishFailed {
                    what: "retry",
                    error: "refused".into(),
                },
                "retry could not be published: refused",
                "publish_failed",
            ),
        ];
        for (cause, reason, label) in cases {
            assert_eq!(cause.to_string(), reason);
            assert_eq!(cause.label(), label, "the label of `{reason}`");
        }
    }

    #[test]
    fn a_delay_too_long_is_one_cause_whoever_asked_for_it() {
        let failure = "job failed (retryable): x".to_owned();
        for of in [
            Delayed::Retry { failure },
            Delayed::Deferral,
            Delayed::FollowUp,
        ] {
            let cause = DeadCause::DelayTooLong {
                of,
                too_long: too_long(),
            };
            assert_eq!(cause.label(), "delay_too_long", "{cause}");
            assert!(
                cause
                    .to_string()
                    .contains("longer than a hold queue can hold"),
                "{cause}"
            );
        }
    }
}
