//! Names and limits of the queues around a work queue.

use std::time::Duration;

use super::BrokerError;
use crate::policy::HoldDelay;

pub use crate::job::MAX_HOLD_DELAY;

/// Because AMQP queue names are short strings (at most 255 bytes), a work queue name must
/// leave room for the longest hold-queue suffix, `.deferred.` plus ten digits.
const MAX_QUEUE_NAME: usize = 255 - ".deferred.".len() - 10;

/// The hold queue for one rounded delay: `{queue}.deferred.{ttl_ms}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HoldQueue {
    /// The hold queue's name.
    pub name: String,
    /// Its `x-message-ttl`, the delay.
    pub ttl_ms: u64,
}

impl HoldQueue {
    /// The hold queue that releases messages onto `queue` after `delay`.
    pub fn for_delay(queue: &str, delay: HoldDelay) -> Self {
        Self::with_ttl(queue, delay.get())
    }

    /// The hold queue with the longest name `queue` can have, for checking that it fits.
    pub fn longest(queue: &str) -> Self {
        Self::with_ttl(queue, MAX_HOLD_DELAY)
    }

    fn with_ttl(queue: &str, delay: Duration) -> Self {
        // Because a hold delay is at most `MAX_HOLD_DELAY`, its milliseconds fit a `u64`.
        let ttl_ms = u64::try_from(delay.min(MAX_HOLD_DELAY).as_millis()).unwrap_or(u64::MAX);
        Self {
            name: format!("{queue}.deferred.{ttl_ms}"),
            ttl_ms,
        }
    }

    /// Its `x-expires`: twice the TTL, so an idle hold queue disappears but one in use
    /// (re-declared at least every half delay while publishes arrive) never does.
    pub fn expires_ms(&self) -> u64 {
        self.ttl_ms * 2
    }
}

/// The dead-letter queue of `queue`.
pub fn dead_letter_queue_name(queue: &str) -> String {
    format!("{queue}.dead")
}

/// Refuse work queue names whose hold queues could not be named.
pub(crate) fn check_queue_name(queue: &str) -> Result<(), BrokerError> {
    if queue.len() > MAX_QUEUE_NAME {
        return Err(BrokerError::QueueNameTooLong {
            name: queue.to_owned(),
            max: MAX_QUEUE_NAME,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::Granularity;

    #[test]
    fn hold_queues_are_named_after_the_queue_and_the_delay_in_milliseconds() {
        let delay = Granularity::default()
            .round(Duration::from_secs(4))
            .expect("fits");
        let hold = HoldQueue::for_delay("app.emails", delay);
        assert_eq!(
            hold,
            HoldQueue {
                name: "app.emails.deferred.4000".into(),
                ttl_ms: 4000
            }
        );
        assert_eq!(hold.expires_ms(), 8000);
    }

    #[test]
    fn the_longest_hold_queue_holds_the_longest_delay() {
        let longest = HoldQueue::longest("q");
        assert_eq!(u128::from(longest.ttl_ms), MAX_HOLD_DELAY.as_millis());
        assert_eq!(longest.name, format!("q.deferred.{}", longest.ttl_ms));
    }

    #[test]
    fn a_queue_name_that_leaves_no_room_for_hold_queue_names_is_refused() {
        assert!(check_queue_name(&"q".repeat(MAX_QUEUE_NAME)).is_ok());
        let err = check_queue_name(&"q".repeat(MAX_QUEUE_NAME + 1)).expect_err("too long");
        assert!(err.to_string().contains("is too long"), "{err}");
    }
}
