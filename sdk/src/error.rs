//! How a handler reports that a job did not complete, and [`JobResultExt`], which turns
//! any other error into that report with `?`.

use std::fmt;
use std::time::Duration;

use crate::MAX_DELAY;

/// The failure a handler returns; the host turns it into a retry, a deferral or a dead
/// letter (see docs/plugin-authors.md, "Retries and backoff").
///
/// Build it with [`JobError::retryable`], [`JobError::fatal`], [`JobError::deferred`],
/// [`JobError::deferred_because`] or [`JobError::retry_after`], or from another error with
/// [`JobResultExt`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobError {
    /// A transient failure: the job's retry policy decides whether and when to try again.
    Retryable(String),
    /// A permanent failure: the job is dead-lettered without spending another attempt.
    Fatal(String),
    /// Not a failure: run the job again after `delay`, without spending an attempt and
    /// without consulting the retry policy (a rate-limited API said when to come back).
    ///
    /// Build it with [`JobError::deferred`]: a `delay` above [`MAX_DELAY`] written here
    /// by hand is turned into the same fatal error when the handler returns it.
    Deferred {
        /// How long the broker holds the job before it is delivered again.
        delay: Duration,
        /// Why the job was deferred, for logs.
        reason: String,
        /// Whether `delay` is what a called service asked for (an HTTP `Retry-After`)
        /// rather than the handler's own choice: a job type whose key rate limit says
        /// `respect_retry_after` then holds the key's other jobs back as long, fleet-wide.
        retry_after: bool,
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
    ///
    /// A `delay` above [`MAX_DELAY`] cannot be held by the broker, so it is a fatal error
    /// instead, saying so: the job is dead-lettered with that reason rather than deferred
    /// for less than asked or deferred again and again.
    pub fn deferred(delay: Duration) -> Self {
        Self::deferred_because(delay, "no reason given")
    }

    /// Run the job again after `delay`, without spending an attempt, saying why; fatal
    /// above [`MAX_DELAY`], as [`JobError::deferred`].
    pub fn deferred_because(delay: Duration, msg: impl Into<String>) -> Self {
        let reason = msg.into();
        if delay > MAX_DELAY {
            return Self::Fatal(format!(
                "the deferral of {delay:?} exceeds the longest hold of {MAX_DELAY:?} ({reason})"
            ));
        }
        Self::Deferred {
            delay,
            reason,
            retry_after: false,
        }
    }

    /// Run the job again after `delay` because the service it called said to come back
    /// then (an HTTP `Retry-After`; [`http`](crate::http)'s `job_result` says so itself).
    /// As [`JobError::deferred_because`], and a job type whose key rate limit says
    /// `respect_retry_after` also holds its key's other jobs back for `delay`.
    pub fn retry_after(delay: Duration, msg: impl Into<String>) -> Self {
        match Self::deferred_because(delay, msg) {
            Self::Deferred { delay, reason, .. } => Self::Deferred {
                delay,
                reason,
                retry_after: true,
            },
            too_long => too_long,
        }
    }

    /// `self`, with a `Deferred` built by hand above [`MAX_DELAY`] made fatal as
    /// [`JobError::deferred_because`] does: what the host receives.
    pub(crate) fn checked(self) -> Self {
        match self {
            Self::Deferred { delay, reason, .. } if delay > MAX_DELAY => {
                Self::deferred_because(delay, reason)
            }
            other => other,
        }
    }

    /// The former name of [`JobError::deferred_because`].
    #[deprecated(since = "0.1.0", note = "use `JobError::deferred_because`")]
    pub fn deferred_msg(delay: Duration, msg: impl Into<String>) -> Self {
        Self::deferred_because(delay, msg)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retryable(msg) => write!(f, "job failed (retryable): {msg}"),
            Self::Fatal(msg) => write!(f, "job failed (fatal): {msg}"),
            Self::Deferred { delay, reason, .. } => {
                write!(f, "job deferred for {delay:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for JobError {}

/// Turns the error of any `Result` into a [`JobError`], so `?` says what a failure means:
///
/// ```
/// use jobhost_sdk::prelude::*;
///
/// fn parse_port(text: &str) -> Result<u16, JobError> {
///     // No retry turns bad input into good input.
///     let port = text.parse::<u16>().fatal()?;
///     Ok(port)
/// }
///
/// assert_eq!(
///     parse_port("http"),
///     Err(JobError::fatal("invalid digit found in string"))
/// );
/// ```
///
/// The message is the error's `Display`.
pub trait JobResultExt<T> {
    /// The error as [`JobError::Retryable`]: the retry policy may try again.
    fn retryable(self) -> Result<T, JobError>;

    /// The error as [`JobError::Fatal`]: the job is dead-lettered now.
    fn fatal(self) -> Result<T, JobError>;
}

impl<T, E: fmt::Display> JobResultExt<T> for Result<T, E> {
    fn retryable(self) -> Result<T, JobError> {
        self.map_err(|error| JobError::retryable(error.to_string()))
    }

    fn fatal(self) -> Result<T, JobError> {
        self.map_err(|error| JobError::fatal(error.to_string()))
    }
}

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
            JobError::deferred_because(Duration::from_secs(30), "rate limited").to_string(),
            "job deferred for 30s: rate limited"
        );
        assert_eq!(
            JobError::deferred(Duration::from_millis(1500)).to_string(),
            "job deferred for 1.5s: no reason given"
        );
    }

    #[test]
    fn a_deferral_of_the_longest_hold_is_a_deferral() {
        assert_eq!(
            JobError::deferred(MAX_DELAY),
            JobError::Deferred {
                delay: MAX_DELAY,
                reason: "no reason given".to_owned(),
                retry_after: false,
            }
        );
    }

    #[test]
    fn a_deferral_a_service_asked_for_says_so_and_is_bounded_as_any_other() {
        assert_eq!(
            JobError::retry_after(Duration::from_secs(7), "429"),
            JobError::Deferred {
                delay: Duration::from_secs(7),
                reason: "429".to_owned(),
                retry_after: true,
            }
        );
        assert!(
            matches!(
                JobError::retry_after(MAX_DELAY + Duration::from_millis(1), "429"),
                JobError::Fatal(_)
            ),
            "too long to hold is fatal whoever asked"
        );
    }

    #[test]
    fn a_deferral_longer_than_the_longest_hold_is_fatal_and_says_why() {
        let too_long = MAX_DELAY + Duration::from_millis(1);
        assert_eq!(
            JobError::deferred_because(too_long, "rate limited"),
            JobError::fatal(
                "the deferral of 2147483.648s exceeds the longest hold of 2147483.647s \
                 (rate limited)"
            )
        );
        assert!(
            matches!(JobError::deferred(Duration::MAX), JobError::Fatal(_)),
            "no delay is too long to be refused"
        );
    }

    #[test]
    #[allow(deprecated)]
    fn the_former_name_of_deferred_because_still_defers() {
        assert_eq!(
            JobError::deferred_msg(Duration::from_secs(1), "later"),
            JobError::deferred_because(Duration::from_secs(1), "later")
        );
    }

    #[test]
    fn question_mark_turns_any_error_into_the_job_error_it_is_told() {
        let io = || -> Result<(), std::io::Error> { Err(std::io::Error::other("disk full")) };
        assert_eq!(io().retryable(), Err(JobError::retryable("disk full")));
        assert_eq!(io().fatal(), Err(JobError::fatal("disk full")));
        let ok: Result<u8, String> = Ok(7);
        assert_eq!(ok.fatal(), Ok(7), "a success passes through");
    }
}
