//! Which retry policy and timeout apply to a delivery, and how delays become hold queues.
//!
//! Resolved per delivery from the plugin loaded *now*, so a hot-reloaded plugin's new
//! policy decides the next failure of a job already mid-retries.
//!
//! - [`decide`]: the retry decision, a pure function of the policy, the attempt, its outcome
//!   and the granularity.
//! - [`effective_policy`], [`effective_timeout`]: which policy and timeout apply.
//! - [`Granularity`], [`HoldDelay`]: how delays become hold queues.

mod decide;

use std::time::Duration;

use jobhost_sdk::{QueueConfig, RetryPolicy};

pub use crate::job::DelayTooLong;
use crate::job::{JobSpec, MAX_HOLD_DELAY};
pub use decide::{Decision, decide};

/// The policy that decides a failed attempt: the job's own `retry(...)`, else its queue's
/// (which is [`RetryPolicy::default`], one attempt, when the queue writes none).
pub fn effective_policy<'a>(job: &'a JobSpec, queue: &'a QueueConfig) -> &'a RetryPolicy {
    job.retry.as_ref().unwrap_or(&queue.retry)
}

/// How long one attempt may run: the job's timeout, else its queue's, else the host default.
pub fn effective_timeout(job: &JobSpec, queue: &QueueConfig, default: Duration) -> Duration {
    job.timeout.or(queue.timeout).unwrap_or(default)
}

/// The step every delay is rounded up to (`retry_granularity`, default 1 s).
///
/// Each distinct rounded delay is its own hold queue, so the step bounds how many hold
/// queues a failing queue can have: with a 5-minute cap, 1 s allows 300 and 10 s allows 30.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granularity(Duration);

impl Default for Granularity {
    fn default() -> Self {
        Self(Duration::from_secs(1))
    }
}

impl Granularity {
    /// A step of `step`; a zero step is raised to one millisecond, the broker's TTL unit.
    pub fn new(step: Duration) -> Self {
        Self(step.max(Duration::from_millis(1)))
    }

    /// The step.
    pub fn step(self) -> Duration {
        self.0
    }

    /// The shortest hold: one step (at most [`MAX_HOLD_DELAY`]), what a job held back by a
    /// cap waits before it is delivered again.
    pub fn one_step(self) -> HoldDelay {
        HoldDelay(self.0.min(MAX_HOLD_DELAY))
    }

    /// The hold for `delay`: rounded up to a whole number of steps, and at least one step,
    /// so that even an immediate retry goes through a hold queue instead of spinning on the
    /// work queue; capped at [`MAX_HOLD_DELAY`], so rounding never turns a delay that fits
    /// into one that does not.
    ///
    /// A delay longer than [`MAX_HOLD_DELAY`] is refused: released early it would break
    /// the promise of the delay, and no hold queue can keep it longer.
    pub fn round(self, delay: Duration) -> Result<HoldDelay, DelayTooLong> {
        if delay > MAX_HOLD_DELAY {
            return Err(DelayTooLong { delay });
        }
        let step = self.0.as_nanos();
        let steps = delay.as_nanos().div_ceil(step).max(1);
        let nanos = steps.saturating_mul(step);
        let rounded = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        Ok(HoldDelay(rounded.min(MAX_HOLD_DELAY)))
    }
}

/// How long a message waits in a hold queue: a whole number of granularity steps, at least
/// one, at most [`MAX_HOLD_DELAY`]. Only [`Granularity::round`] makes one, so every delay
/// that reaches a backend has been rounded and capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HoldDelay(Duration);

impl HoldDelay {
    /// The delay.
    pub fn get(self) -> Duration {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(retry: Option<RetryPolicy>, timeout: Option<Duration>) -> JobSpec {
        JobSpec {
            name: "j".into(),
            queue: "q".into(),
            retry,
            timeout,
        }
    }

    #[test]
    fn a_job_policy_replaces_the_queue_policy_entirely() {
        let mut queue = QueueConfig::new("q");
        queue.retry = RetryPolicy::exponential(3);
        let own = RetryPolicy::fixed(5, Duration::from_secs(2));
        assert_eq!(
            effective_policy(&job(Some(own.clone()), None), &queue),
            &own
        );
        assert_eq!(
            effective_policy(&job(None, None), &queue),
            &RetryPolicy::exponential(3)
        );
    }

    #[test]
    fn a_job_on_a_queue_without_retry_gets_one_attempt() {
        let queue = QueueConfig::new("q");
        assert_eq!(
            effective_policy(&job(None, None), &queue),
            &RetryPolicy::default()
        );
        assert_eq!(effective_policy(&job(None, None), &queue).max_attempts, 1);
    }

    #[test]
    fn the_job_timeout_wins_over_the_queue_timeout_which_wins_over_the_default() {
        let mut queue = QueueConfig::new("q");
        let default = Duration::from_secs(300);
        assert_eq!(
            effective_timeout(&job(None, None), &queue, default),
            default
        );
        queue.timeout = Some(Duration::from_secs(9));
        assert_eq!(
            effective_timeout(&job(None, None), &queue, default),
            Duration::from_secs(9)
        );
        let own = Some(Duration::from_secs(2));
        assert_eq!(
            effective_timeout(&job(None, own), &queue, default),
            Duration::from_secs(2)
        );
    }

    fn held(granularity: Granularity, delay: Duration) -> Duration {
        granularity.round(delay).expect("fits a hold queue").get()
    }

    #[test]
    fn delays_round_up_to_whole_steps_and_at_least_one_step() {
        let second = Granularity::default();
        assert_eq!(held(second, Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            held(second, Duration::from_millis(1)),
            Duration::from_secs(1)
        );
        assert_eq!(held(second, Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(
            held(second, Duration::from_millis(2001)),
            Duration::from_secs(3)
        );
        let ten = Granularity::new(Duration::from_secs(10));
        assert_eq!(held(ten, Duration::from_secs(11)), Duration::from_secs(20));
        assert_eq!(
            Granularity::new(Duration::ZERO).step(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn the_longest_hold_is_never_rounded_past_what_a_hold_queue_can_hold() {
        assert_eq!(held(Granularity::default(), MAX_HOLD_DELAY), MAX_HOLD_DELAY);
        let hour = Granularity::new(Duration::from_secs(3600));
        assert_eq!(
            held(hour, MAX_HOLD_DELAY - Duration::from_secs(1)),
            MAX_HOLD_DELAY
        );
    }

    #[test]
    fn a_delay_longer_than_a_hold_queue_can_hold_is_refused_not_shortened() {
        let too_long = MAX_HOLD_DELAY + Duration::from_millis(1);
        assert_eq!(
            Granularity::default().round(too_long),
            Err(DelayTooLong { delay: too_long })
        );
        assert!(Granularity::default().round(Duration::MAX).is_err());
    }
}
