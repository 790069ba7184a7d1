//! Names and limits of permit queues: where a fleet-wide concurrency cap keeps its permits
//! (docs/flow-control.md).
//!
//! A cap's scope (a work queue, or one key of a job type) and its limit name one permit
//! queue, `jobhost.permits.{q|k}.{digest}.{limit}`. The digest is 32 hex digits of a
//! SHA-256 over the scope, so a hostile key (control characters, a megabyte of text) never
//! reaches a queue name, and every name is short and of one shape. The limit is part of
//! the name, because a queue's arguments are fixed when it is created: a changed limit is
//! a new permit queue, never a declaration the broker refuses.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// How long a permit queue nobody takes from lives at least, on a broker.
const MIN_EXPIRY: Duration = Duration::from_secs(10 * 60);

/// One cap's permits: at most `limit` are held at once, across every host on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permits {
    /// The permit queue's name.
    pub name: String,
    /// How many permits it holds.
    pub limit: u32,
    /// The longest a permit is held: the permit queue must outlive any lease taken on it.
    pub held_at_most: Duration,
}

impl Permits {
    /// The permits of work queue `queue`'s cap.
    pub fn for_queue(queue: &str, limit: u32, held_at_most: Duration) -> Self {
        Self::named(&Scope::queue(queue), limit, held_at_most)
    }

    /// The permits of one key of `job_type`: `key` is the key's text, `None` the bucket of
    /// jobs without one.
    pub fn for_key(job_type: &str, key: Option<&str>, limit: u32, held_at_most: Duration) -> Self {
        Self::named(&Scope::key(job_type, key), limit, held_at_most)
    }

    fn named(scope: &Scope, limit: u32, held_at_most: Duration) -> Self {
        Self {
            name: format!("jobhost.permits.{}.{limit}", scope.0),
            limit,
            held_at_most,
        }
    }

    /// How long the permit queue lives after its last use (`x-expires`): twice the longest
    /// hold and at least ten minutes, because a queue that expired under a held permit would
    /// be made again with all its permits, one more than the cap while that job runs.
    pub fn expires(&self) -> Duration {
        (self.held_at_most * 2).max(MIN_EXPIRY)
    }
}

/// A limit's scope in a queue name: `q.{digest}` for a work queue, `k.{digest}` for one key
/// of a job type. Permit queues and token queues name their scopes alike.
pub(super) struct Scope(String);

impl Scope {
    /// Work queue `queue`.
    pub(super) fn queue(queue: &str) -> Self {
        Self::digest('q', &[queue.as_bytes()])
    }

    /// One key of `job_type`: `key` is the key's text, `None` the bucket of jobs without one.
    pub(super) fn key(job_type: &str, key: Option<&str>) -> Self {
        let key = match key {
            // Tagged, so no key's text can name the bucket of jobs without one.
            Some(text) => [b"v".as_slice(), text.as_bytes()].concat(),
            None => b"-".to_vec(),
        };
        Self::digest('k', &[job_type.as_bytes(), &key])
    }

    fn digest(kind: char, parts: &[&[u8]]) -> Self {
        let mut digest = Sha256::new();
        for part in parts {
            // Length-prefixed, so `("ab", "c")` and `("a", "bc")` are two scopes.
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let hex: String = digest.finalize()[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        Self(format!("{kind}.{hex}"))
    }

    /// The text: `q.{digest}` or `k.{digest}`.
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_hostile_key_makes_a_short_name_of_one_shape() {
        let hostile = format!("\u{0}\n\u{202e}{}", "x".repeat(1 << 20));
        for permits in [
            Permits::for_key("email.Send", Some(&hostile), 2, HOUR),
            Permits::for_key("email.Send", Some(""), 2, HOUR),
            Permits::for_queue("emails", 4, HOUR),
        ] {
            let name = &permits.name;
            assert!(name.len() <= 60, "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'),
                "{name}"
            );
        }
    }

    #[test]
    fn every_scope_and_limit_names_its_own_queue() {
        let names = [
            Permits::for_key("t", Some("a"), 2, HOUR).name,
            Permits::for_key("t", Some("b"), 2, HOUR).name,
            Permits::for_key("t", Some("a"), 3, HOUR).name,
            Permits::for_key("u", Some("a"), 2, HOUR).name,
            Permits::for_key("t", None, 2, HOUR).name,
            Permits::for_key("t", Some("-"), 2, HOUR).name,
            Permits::for_queue("t", 2, HOUR).name,
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(
            Permits::for_key("t", Some("a"), 2, HOUR),
            Permits::for_key("t", Some("a"), 2, HOUR),
            "the same scope names the same queue on every host"
        );
    }

    #[test]
    fn a_permit_queue_outlives_the_longest_hold() {
        let permits = Permits::for_queue("q", 1, Duration::from_secs(27 * 60));
        assert_eq!(permits.expires(), Duration::from_secs(54 * 60));
        let short = Permits::for_queue("q", 1, Duration::from_secs(1));
        assert_eq!(short.expires(), MIN_EXPIRY);
    }
}
