//! Retry policies and their arithmetic.
//!
//! This is the one implementation of the rules of docs/plugin-authors.md, "Retries and backoff":
//! guests compile it to `wasm32-wasip2` to describe their policies, and the host runs the
//! same code to decide what happens after a failed attempt.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How many attempts a job gets in total, and how long to wait before each retry.
///
/// The default is one attempt and no backoff: a job without a policy is dead-lettered on
/// its first failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Total attempts including the first; `1` means no retries.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::none()
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub const fn none() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::None,
        }
    }

    /// `max_attempts` attempts with [`Backoff::exponential`] waits between them.
    pub const fn exponential(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::exponential(),
        }
    }

    /// `max_attempts` attempts with a constant `delay` between them.
    pub const fn fixed(max_attempts: u32, delay: Duration) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Fixed(delay),
        }
    }

    /// `max_attempts` attempts with the given backoff.
    pub const fn new(max_attempts: u32, backoff: Backoff) -> Self {
        Self {
            max_attempts,
            backoff,
        }
    }

    /// What to do after attempt `failed_attempt` (1-based) failed retryably: give up once
    /// `failed_attempt >= max_attempts`, otherwise retry after [`Backoff::delay_for`].
    pub fn decide(&self, failed_attempt: u32) -> RetryDecision {
        if failed_attempt >= self.max_attempts {
            RetryDecision::GiveUp
        } else {
            RetryDecision::Retry {
                delay: self.backoff.delay_for(failed_attempt),
            }
        }
    }
}

/// What the worker does with a retryable failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Publish the job again, to be delivered after `delay`.
    Retry {
        /// How long the broker holds the job before it is delivered again.
        delay: Duration,
    },
    /// The job is out of attempts: dead-letter it.
    GiveUp,
}

/// The wait before a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Backoff {
    /// Retry at once.
    None,
    /// The same wait before every retry.
    Fixed(Duration),
    /// `min(max, base * factor^(failed_attempt - 1))`, optionally with full jitter.
    Exponential {
        /// The wait after the first failed attempt.
        base: Duration,
        /// The growth per failed attempt.
        factor: f64,
        /// The cap on any single wait.
        max: Duration,
        /// Draw the wait uniformly from `[0, computed]` instead of using `computed`.
        jitter: bool,
    },
}

impl Backoff {
    /// The default exponential backoff: base 1 s, factor 2.0, capped at 5 min, with jitter.
    pub const fn exponential() -> Self {
        Self::Exponential {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(300),
            jitter: true,
        }
    }

    /// The wait after attempt `failed_attempt` failed, jitter applied.
    ///
    /// Total: never panics, whatever the numbers. `failed_attempt` is clamped to at least 1,
    /// exponentiation saturates to `max`, a non-finite or non-positive `factor` degenerates
    /// to a constant `base`, and a zero `base` or `max` yields [`Duration::ZERO`]. The result
    /// is never above `max`.
    pub fn delay_for(&self, failed_attempt: u32) -> Duration {
        let computed = self.computed_delay(failed_attempt);
        match self {
            Self::Exponential { jitter: true, .. } if !computed.is_zero() => {
                // Full jitter: a thousand jobs failing together spread over the whole
                // interval instead of retrying in lockstep.
                let nanos = rand::rng().random_range(0..=computed.as_nanos());
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            _ => computed,
        }
    }

    /// The wait after attempt `failed_attempt` failed, before jitter: the upper bound of
    /// what [`Backoff::delay_for`] returns. Tables of a policy's schedule are made of these.
    pub fn computed_delay(&self, failed_attempt: u32) -> Duration {
        match *self {
            Self::None => Duration::ZERO,
            Self::Fixed(delay) => delay,
            Self::Exponential {
                base, factor, max, ..
            } => exponential_delay(base, factor, max, failed_attempt.max(1)),
        }
    }
}

fn exponential_delay(base: Duration, factor: f64, max: Duration, failed_attempt: u32) -> Duration {
    if base.is_zero() || max.is_zero() {
        return Duration::ZERO;
    }
    if !factor.is_finite() || factor <= 0.0 {
        return base.min(max);
    }
    let secs = base.as_secs_f64() * factor.powf(f64::from(failed_attempt - 1));
    if !secs.is_finite() || secs >= max.as_secs_f64() {
        return max;
    }
    Duration::try_from_secs_f64(secs).map_or(max, |delay| delay.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn exact(base: u64, factor: f64, max: u64) -> Backoff {
        Backoff::Exponential {
            base: Duration::from_secs(base),
            factor,
            max: Duration::from_secs(max),
            jitter: false,
        }
    }

    #[test]
    fn the_chapter_table_holds_for_the_default_backoff_without_jitter() {
        let backoff = exact(1, 2.0, 300);
        let table = [
            (1, 1),
            (2, 2),
            (3, 4),
            (4, 8),
            (9, 256),
            (10, 300),
            (11, 300),
            (100, 300),
        ];
        for (attempt, secs) in table {
            assert_eq!(
                backoff.delay_for(attempt),
                Duration::from_secs(secs),
                "failed attempt {attempt}"
            );
        }
    }

    #[test]
    fn decide_gives_up_exactly_when_the_failed_attempt_reaches_max_attempts() {
        let policy = RetryPolicy::fixed(3, Duration::from_millis(500));
        let retry = RetryDecision::Retry {
            delay: Duration::from_millis(500),
        };
        assert_eq!(policy.decide(1), retry);
        assert_eq!(policy.decide(2), retry);
        assert_eq!(policy.decide(3), RetryDecision::GiveUp);
        assert_eq!(policy.decide(4), RetryDecision::GiveUp);
        assert_eq!(RetryPolicy::none().decide(1), RetryDecision::GiveUp);
        assert_eq!(
            RetryPolicy::new(0, Backoff::None).decide(0),
            RetryDecision::GiveUp
        );
    }

    #[test]
    fn the_default_policy_is_one_attempt_without_backoff() {
        assert_eq!(
            RetryPolicy::default(),
            RetryPolicy {
                max_attempts: 1,
                backoff: Backoff::None
            }
        );
        assert_eq!(RetryPolicy::default(), RetryPolicy::none());
    }

    #[test]
    fn constructors_build_the_policies_the_chapter_lists() {
        assert_eq!(RetryPolicy::exponential(5).max_attempts, 5);
        assert_eq!(RetryPolicy::exponential(5).backoff, Backoff::exponential());
        assert_eq!(
            Backoff::exponential(),
            Backoff::Exponential {
                base: Duration::from_secs(1),
                factor: 2.0,
                max: Duration::from_secs(300),
                jitter: true,
            }
        );
        assert_eq!(
            RetryPolicy::new(4, exact(2, 3.0, 60)).decide(2),
            RetryDecision::Retry {
                delay: Duration::from_secs(6)
            }
        );
    }

    #[test]
    fn attempt_zero_is_treated_as_the_first_failed_attempt() {
        assert_eq!(exact(1, 2.0, 300).delay_for(0), Duration::from_secs(1));
    }

    #[test]
    fn huge_attempts_saturate_to_the_cap() {
        assert_eq!(
            exact(1, 2.0, 300).delay_for(u32::MAX),
            Duration::from_secs(300)
        );
        let huge = Backoff::Exponential {
            base: Duration::MAX,
            factor: f64::MAX,
            max: Duration::MAX,
            jitter: false,
        };
        assert_eq!(huge.delay_for(u32::MAX), Duration::MAX);
    }

    #[test]
    fn a_non_finite_or_non_positive_factor_degenerates_to_a_constant_base() {
        for factor in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -2.0] {
            let backoff = exact(3, factor, 60);
            for attempt in [0, 1, 2, 10, u32::MAX] {
                assert_eq!(
                    backoff.delay_for(attempt),
                    Duration::from_secs(3),
                    "factor {factor}, attempt {attempt}"
                );
            }
        }
        assert_eq!(
            exact(90, f64::NAN, 60).delay_for(1),
            Duration::from_secs(60),
            "still capped"
        );
    }

    #[test]
    fn a_zero_base_or_max_yields_no_wait() {
        assert_eq!(exact(0, 2.0, 60).delay_for(5), Duration::ZERO);
        assert_eq!(exact(1, 2.0, 0).delay_for(5), Duration::ZERO);
        let jittered = Backoff::Exponential {
            base: Duration::ZERO,
            factor: 2.0,
            max: Duration::from_secs(5),
            jitter: true,
        };
        assert_eq!(jittered.delay_for(3), Duration::ZERO);
    }

    #[test]
    fn none_and_fixed_backoffs_ignore_the_attempt() {
        assert_eq!(Backoff::None.delay_for(7), Duration::ZERO);
        let fixed = Backoff::Fixed(Duration::from_millis(750));
        assert_eq!(fixed.delay_for(0), Duration::from_millis(750));
        assert_eq!(fixed.delay_for(u32::MAX), Duration::from_millis(750));
    }

    #[test]
    fn jitter_stays_within_zero_and_the_computed_wait_and_really_spreads() {
        let backoff = Backoff::exponential();
        for attempt in [1, 3, 6, 9, 12] {
            let ceiling = backoff.computed_delay(attempt);
            let draws: Vec<Duration> = (0..2_000).map(|_| backoff.delay_for(attempt)).collect();
            assert!(
                draws.iter().all(|d| *d <= ceiling),
                "attempt {attempt}: above {ceiling:?}"
            );
            let low = draws.iter().filter(|d| **d < ceiling / 4).count();
            let high = draws.iter().filter(|d| **d > ceiling * 3 / 4).count();
            // Uniform on [0, ceiling]: each quarter holds ~500 of 2000 draws; 300 is far
            // outside any plausible deviation yet far above what a narrow jitter would give.
            assert!(
                low > 300 && high > 300,
                "attempt {attempt}: {low} low, {high} high draws"
            );
        }
    }

    #[test]
    fn policies_round_trip_through_json() {
        let policy = RetryPolicy::new(4, exact(2, 3.0, 60));
        let json = serde_json::to_string(&policy).expect("serialize");
        assert_eq!(
            serde_json::from_str::<RetryPolicy>(&json).expect("deserialize"),
            policy
        );
    }
}
