//! Names and limits of the queues around a work queue.

use std::time::Duration;

use super::BrokerError;
use crate::policy::HoldDelay;
use crate::text;

pub use crate::job::MAX_HOLD_DELAY;

/// The longest AMQP short string: queue names and the `type` property (a job type) are ones.
pub const SHORT_STRING_MAX: usize = 255;

/// Because a work queue's hold and dead-letter queues are named after it, a name must leave
/// room for the longest hold-queue suffix, `.deferred.` plus ten digits.
const MAX_QUEUE_NAME: usize = SHORT_STRING_MAX - ".deferred.".len() - 10;

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

/// The one rule for a work queue's name, which a manifest declares and the broker uses:
/// not empty, no whitespace or control characters, not the broker's reserved `amq.`
/// prefix, not a name of another queue's dead-letter or hold queue, and short enough to
/// leave room for its hold queues' names. The error is the reason, to be put after the name.
pub fn queue_name_rule(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("it contains whitespace or control characters".to_owned());
    }
    if name.starts_with("amq.") {
        return Err("the `amq.` prefix is reserved by the broker".to_owned());
    }
    if name.ends_with(&dead_letter_queue_name("")) || name.contains(".deferred.") {
        return Err("it looks like a dead-letter or hold queue name".to_owned());
    }
    if name.len() > MAX_QUEUE_NAME {
        let longest = HoldQueue::longest(name).name;
        return Err(format!(
            "its hold queue `{}` would be longer than {SHORT_STRING_MAX} bytes",
            text::bounded(&longest, SHORT_STRING_MAX)
        ));
    }
    Ok(())
}

/// [`queue_name_rule`], as the broker's error.
pub(crate) fn check_queue_name(queue: &str) -> Result<(), BrokerError> {
    queue_name_rule(queue).map_err(|reason| BrokerError::InvalidQueueName {
        name: text::bounded(queue, SHORT_STRING_MAX).into_owned(),
        reason,
    })
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
        assert!(
            err.to_string().contains("would be longer than 255 bytes"),
            "{err}"
        );
        for (name, reason) in [
            ("", "it is empty"),
            ("a b", "whitespace"),
            ("amq.x", "reserved"),
            ("q.dead", "dead-letter or hold queue"),
            ("q.deferred.1000", "dead-letter or hold queue"),
        ] {
            let err = queue_name_rule(name).expect_err(name);
            assert!(err.contains(reason), "`{name}`: {err}");
        }
    }
}
