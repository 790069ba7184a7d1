//! The retry decision: what becomes of an attempt, given the effective policy, the attempt
//! number, the attempt's outcome and the hold queues' granularity. A pure function; the
//! worker publishes, acks and logs what it returns.
//!
//! The story of a job that fails, as the user's guide tells it (docs/plugin-authors.md,
//! "Retries and backoff"):
//!
//! 1. **It completed.** Its follow-ups are published, then it is acked.
//! 2. **It failed fatally**, or the guest could not decode its payload: no retry policy can
//!    help, so it goes to the dead-letter queue on this attempt (`fatal error: ...`,
//!    `decode error: ...`).
//! 3. **It deferred itself** (`JobError::deferred(delay, ..)`): it waits in a hold queue for
//!    the delay rounded up to the granularity, *without* spending an attempt and without
//!    asking the policy. A delay no hold queue can hold dead-letters it, naming the delay.
//! 4. **It failed retryably**, or crashed (a trap, a panic, a timeout, the memory cap, a
//!    budget): the policy is asked. While attempts are left, the job waits in a hold queue
//!    for the backoff's delay, rounded up, and comes back with `attempt + 1`. When they are
//!    spent, it is dead-lettered as `max attempts (N) exhausted after attempt n: ...`.
//!    A backoff longer than a hold queue can hold dead-letters it too, naming both the
//!    delay and the failure.

use jobhost_sdk::{JobError, RetryDecision, RetryPolicy};

use super::{Granularity, HoldDelay};
use crate::job::{DeadCause, Delayed, FollowUp, Outcome};

/// What becomes of an attempt.
#[derive(Debug)]
pub enum Decision {
    /// It completed: publish its follow-ups, then ack.
    Complete {
        /// The jobs the handler enqueued, in order.
        follow_ups: Vec<FollowUp>,
    },
    /// Publish its next attempt into the hold queue for `delay`, then ack.
    Retry {
        /// How long it waits.
        delay: HoldDelay,
        /// Why this attempt failed.
        failure: JobError,
    },
    /// Publish it, deferred, into the hold queue for `delay`, then ack; no attempt spent.
    Defer {
        /// How long it waits.
        delay: HoldDelay,
        /// Why the handler deferred it.
        reason: String,
        /// Whether a called service asked for the wait (`Retry-After`).
        retry_after: bool,
    },
    /// Dead-letter it.
    DeadLetter(DeadCause),
}

/// Decide what becomes of `attempt` (1-based) of a job whose effective policy is `policy`
/// and whose handler ended as `outcome`; delays are rounded up to `granularity`.
pub fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    outcome: Outcome,
    granularity: Granularity,
) -> Decision {
    let failure = match outcome {
        Outcome::Completed { follow_ups } => return Decision::Complete { follow_ups },
        Outcome::Undecodable(error) => return Decision::DeadLetter(DeadCause::Decode(error)),
        Outcome::Failed(fatal @ JobError::Fatal(_)) => {
            return Decision::DeadLetter(DeadCause::Fatal(fatal.to_string()));
        }
        Outcome::Failed(JobError::Deferred {
            delay,
            reason,
            retry_after,
        }) => {
            return match granularity.round(delay) {
                Ok(delay) => Decision::Defer {
                    delay,
                    reason,
                    retry_after,
                },
                Err(too_long) => Decision::DeadLetter(DeadCause::DelayTooLong {
                    of: Delayed::Deferral,
                    too_long,
                }),
            };
        }
        Outcome::Failed(failure) => failure,
        Outcome::Crashed(reason) => JobError::Retryable(reason),
    };
    match policy.decide(attempt) {
        RetryDecision::Retry { delay } => match granularity.round(delay) {
            Ok(delay) => Decision::Retry { delay, failure },
            Err(too_long) => Decision::DeadLetter(DeadCause::DelayTooLong {
                of: Delayed::Retry {
                    failure: failure.to_string(),
                },
                too_long,
            }),
        },
        RetryDecision::GiveUp => Decision::DeadLetter(DeadCause::MaxAttempts {
            max: policy.max_attempts,
            attempt,
            failure: failure.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jobhost_sdk::Backoff;

    use super::*;
    use crate::job::MAX_HOLD_DELAY;

    const SECOND: Duration = Duration::from_secs(1);

    fn retryable() -> Outcome {
        Outcome::Failed(JobError::retryable("service is down"))
    }

    /// The chapter's table: exponential, base 1 s, factor 2, cap 5 m, no jitter.
    fn chapter_policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy::new(
            max_attempts,
            Backoff::Exponential {
                base: SECOND,
                factor: 2.0,
                max: Duration::from_secs(300),
                jitter: false,
            },
        )
    }

    fn retried_after(decision: Decision) -> Duration {
        match decision {
            Decision::Retry { delay, .. } => delay.get(),
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    fn dead_letter(decision: Decision) -> String {
        match decision {
            Decision::DeadLetter(cause) => cause.to_string(),
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }

    #[test]
    fn retries_wait_the_chapters_computed_waits_up_to_the_cap() {
        let policy = chapter_policy(20);
        for (attempt, wait) in [
            (1, 1),
            (2, 2),
            (3, 4),
            (4, 8),
            (9, 256),
            (10, 300),
            (15, 300),
        ] {
            let decision = decide(&policy, attempt, retryable(), Granularity::default());
            assert_eq!(
                retried_after(decision),
                Duration::from_secs(wait),
                "the wait after failed attempt {attempt}"
            );
        }
    }

    #[test]
    fn the_last_attempt_dead_letters_naming_both_numbers() {
        let decision = decide(&chapter_policy(2), 2, retryable(), Granularity::default());
        assert_eq!(
            dead_letter(decision),
            "max attempts (2) exhausted after attempt 2: job failed (retryable): service is down"
        );
    }

    #[test]
    fn no_policy_means_the_first_failure_is_the_last() {
        let decision = decide(
            &RetryPolicy::default(),
            1,
            retryable(),
            Granularity::default(),
        );
        assert!(dead_letter(decision).starts_with("max attempts (1) exhausted after attempt 1"));
    }

    #[test]
    fn a_crash_is_retried_like_a_retryable_failure() {
        let crashed = Outcome::Crashed("job timed out after 2s".into());
        match decide(&chapter_policy(3), 1, crashed, Granularity::default()) {
            Decision::Retry { failure, delay } => {
                assert_eq!(
                    failure.to_string(),
                    "job failed (retryable): job timed out after 2s"
                );
                assert_eq!(delay.get(), SECOND);
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn a_fatal_failure_and_an_undecodable_payload_never_consult_the_policy() {
        let fatal = Outcome::Failed(JobError::fatal("bad address"));
        assert_eq!(
            dead_letter(decide(&chapter_policy(5), 1, fatal, Granularity::default())),
            "fatal error: job failed (fatal): bad address"
        );
        let undecodable = Outcome::Undecodable("missing field `to`".into());
        assert_eq!(
            dead_letter(decide(
                &chapter_policy(5),
                1,
                undecodable,
                Granularity::default()
            )),
            "decode error: missing field `to`"
        );
    }

    #[test]
    fn a_deferral_never_consults_the_policy_and_rounds_up_its_delay() {
        let by_handler = JobError::deferred_because(Duration::from_millis(1500), "429");
        let by_service = JobError::retry_after(Duration::from_millis(1500), "429");
        for (deferred, asked_by_service) in [(by_handler, false), (by_service, true)] {
            // The last attempt of a one-attempt policy: a deferral still does not spend it.
            let outcome = Outcome::Failed(deferred);
            match decide(&RetryPolicy::default(), 1, outcome, Granularity::default()) {
                Decision::Defer {
                    delay,
                    reason,
                    retry_after,
                } => {
                    assert_eq!(delay.get(), Duration::from_secs(2));
                    assert_eq!(reason, "429");
                    assert_eq!(retry_after, asked_by_service, "who asked for the wait");
                }
                other => panic!("expected a deferral, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_delay_no_hold_queue_can_hold_dead_letters_as_delay_too_long() {
        let too_long = MAX_HOLD_DELAY + SECOND;
        let deferred = Outcome::Failed(JobError::Deferred {
            delay: too_long,
            reason: "later".into(),
            retry_after: false,
        });
        let decision = decide(&RetryPolicy::default(), 1, deferred, Granularity::default());
        let Decision::DeadLetter(cause) = decision else {
            panic!("expected a dead letter");
        };
        assert_eq!(cause.label(), "delay_too_long");
        let fixed = RetryPolicy::fixed(3, too_long);
        let decision = decide(&fixed, 1, retryable(), Granularity::default());
        let reason = dead_letter(decision);
        assert!(
            reason.starts_with("cannot retry the job: a delay of")
                && reason.ends_with("it failed with: job failed (retryable): service is down"),
            "{reason}"
        );
    }

    #[test]
    fn a_completion_passes_its_follow_ups_through() {
        let completed = Outcome::Completed {
            follow_ups: Vec::new(),
        };
        assert!(matches!(
            decide(&RetryPolicy::default(), 1, completed, Granularity::default()),
            Decision::Complete { follow_ups } if follow_ups.is_empty()
        ));
    }
}
