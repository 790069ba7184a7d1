//! How a handler reports that a job did not complete.

use std::fmt;
use std::time::Duration;

/// The failure a handler returns; the host turns it into a retry, a deferral or a dead
/// letter (see the user's chapter "Retries and backoff").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobError {
    /// A transient failure: the job's retry policy decides whether and when to try again.
    Retryable(String),
    /// A permanent failure: the job is dead-lettered without spending another attempt.
    Fatal(String),
    /// Not a failure: run the job again after `delay`, without spending an attempt and
    /// without consulting the retry policy (a rate-limited API said when to come back).
    Deferred {
        /// How long the broker holds the job before it is delivered again.
        delay: Duration,
        /// Why the job was deferred, for logs.
        reason: String,
    },
}

impl JobError {
    /// A transient failure that the retry policy may retry.
    pub fn retryable(msg: impl Into<String>) -> Self {
        Self::Retryable(msg.into())
    }

    /// A permanent failure: dead-letter the job now.
    pub fn fatal(msg: impl Into<String>) -> Self {
        Self::Fatal(msg.into())
    }

    /// Run the job again after `delay`, without spending an attempt.
    pub fn deferred(delay: Duration) -> Self {
        Self::deferred_msg(delay, "no reason given")
    }

    /// Run the job again after `delay`, without spending an attempt, saying why.
    pub fn deferred_msg(delay: Duration, msg: impl Into<String>) -> Self {
        Self::Deferred {
            delay,
            reason: msg.into(),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retryable(msg) => write!(f, "job failed (retryable): {msg}"),
            Self::Fatal(msg) => write!(f, "job failed (fatal): {msg}"),
            Self::Deferred { delay, reason } => write!(f, "job deferred for {delay:?}: {reason}"),
        }
    }
}

impl std::error::Error for JobError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_errors_display_as_the_chapter_writes_them() {
        assert_eq!(
            JobError::retryable("service is down").to_string(),
            "job failed (retryable): service is down"
        );
        assert_eq!(
            JobError::fatal("bad address").to_string(),
            "job failed (fatal): bad address"
        );
        assert_eq!(
            JobError::deferred_msg(Duration::from_secs(30), "rate limited").to_string(),
            "job deferred for 30s: rate limited"
        );
        assert_eq!(
            JobError::deferred(Duration::from_millis(1500)).to_string(),
            "job deferred for 1.5s: no reason given"
        );
    }
}
