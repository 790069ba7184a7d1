//! How long a job can wait in a hold queue: the one limit the broker, the policy and the
//! settlement all speak of.

use std::time::Duration;

/// The longest delay a hold queue can hold: the SDK's [`jobhost_sdk::MAX_DELAY`], the one
/// limit the derives check at compile time and `JobError::deferred` at run time.
///
/// Because `x-expires` is twice the TTL and RabbitMQ caps both at 2^32 - 1 ms, the TTL
/// itself can be at most half of that (about 24.8 days). Longer delays are refused rather
/// than released early.
pub const MAX_HOLD_DELAY: Duration = jobhost_sdk::MAX_DELAY;

/// A delay longer than a hold queue can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a delay of {delay:?} is longer than a hold queue can hold (at most {MAX_HOLD_DELAY:?})")]
pub struct DelayTooLong {
    /// The delay asked for.
    pub delay: Duration,
}
