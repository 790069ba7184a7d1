//! Deliveries the worker failed to settle, so a message that can never be settled ends up
//! in its dead-letter queue instead of being redelivered for ever.
//!
//! # Contract
//! - A failed settlement (a publish or an ack that did not happen) is counted against the
//!   message, identified by a hash of its body, which a redelivery repeats byte for byte.
//! - A redelivered message with counted failures waits [`Unsettled::backoff`] before it
//!   runs again, so a transient failure never becomes a hot loop.
//! - A message that failed to settle `max_redeliveries` times is poison: the worker
//!   dead-letters it without running it.
//! - Counts live in this process and are bounded ([`TRACKED_MAX`] messages); a settled
//!   message is forgotten. A host restart forgets every count, which only delays poison
//!   detection, never loses a message.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

/// Messages with counted failures kept at most; past it the counts start over, because a
/// broker redelivering that many distinct messages is in an outage, not a poison loop.
const TRACKED_MAX: usize = 100_000;

/// The pause before a message whose settlement failed once runs again; it doubles with
/// each further failure.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The longest pause before a message runs again.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The identity of a message across redeliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct MessageKey(u64);

impl MessageKey {
    pub(super) fn of(queue: &str, body: &[u8]) -> Self {
        let mut hasher = DefaultHasher::new();
        queue.hash(&mut hasher);
        body.hash(&mut hasher);
        Self(hasher.finish())
    }
}

/// Failed settlements per message.
#[derive(Debug, Default)]
pub(super) struct Unsettled {
    failures: Mutex<HashMap<MessageKey, u32>>,
}

impl Unsettled {
    /// How often settling `key` failed in this process.
    pub(super) fn failures(&self, key: MessageKey) -> u32 {
        self.lock().get(&key).copied().unwrap_or(0)
    }

    /// Count a failed settlement of `key`; returns the new count.
    pub(super) fn failed(&self, key: MessageKey) -> u32 {
        let mut failures = self.lock();
        if failures.len() >= TRACKED_MAX && !failures.contains_key(&key) {
            failures.clear();
        }
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// `key` was settled: forget it.
    pub(super) fn settled(&self, key: MessageKey) {
        self.lock().remove(&key);
    }

    /// The pause before a message that failed to settle `failures` times runs again.
    pub(super) fn backoff(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        BACKOFF_FIRST
            .saturating_mul(1 << doublings)
            .min(BACKOFF_MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageKey, u32>> {
        // A panic while holding this lock cannot leave the map inconsistent: every
        // operation is a single map call.
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redelivery_of_the_same_body_on_the_same_queue_is_the_same_message() {
        assert_eq!(MessageKey::of("q", b"body"), MessageKey::of("q", b"body"));
        assert_ne!(MessageKey::of("q", b"body"), MessageKey::of("q", b"other"));
        assert_ne!(MessageKey::of("q", b"body"), MessageKey::of("r", b"body"));
    }

    #[test]
    fn failures_are_counted_until_the_message_settles() {
        let unsettled = Unsettled::default();
        let key = MessageKey::of("q", b"x");
        assert_eq!(unsettled.failures(key), 0);
        assert_eq!(unsettled.failed(key), 1);
        assert_eq!(unsettled.failed(key), 2);
        assert_eq!(unsettled.failures(key), 2);
        unsettled.settled(key);
        assert_eq!(unsettled.failures(key), 0, "a settled message is forgotten");
    }

    #[test]
    fn the_pause_before_running_again_doubles_up_to_a_cap() {
        assert_eq!(Unsettled::backoff(1), Duration::from_millis(250));
        assert_eq!(Unsettled::backoff(2), Duration::from_millis(500));
        assert_eq!(Unsettled::backoff(3), Duration::from_secs(1));
        assert_eq!(Unsettled::backoff(100), BACKOFF_MAX);
        assert_eq!(Unsettled::backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn the_counts_are_bounded() {
        let unsettled = Unsettled::default();
        for n in 0..=TRACKED_MAX as u64 {
            unsettled.failed(MessageKey(n));
        }
        assert!(unsettled.lock().len() <= TRACKED_MAX);
    }
}
