//! Unique jobs: the lock a job holds on its (job type, key) while it is queued, held or
//! running, so a second enqueue of the same key is refused with the first job's id.
//!
//! A lock is named by a hash, `jobhost.unique.{32 hex digits}.{for_ms}`: the hash is of
//! the job type and the key, so no key a producer sends ever reaches a queue name or a
//! log line, and `for_ms` is in the name because RabbitMQ refuses to declare a queue
//! again with other arguments (two enqueues of one key with different `for`s take
//! different locks). The envelope carries the name (`unique_lock`), so whichever host
//! settles the job releases it.
//!
//! Contract every backend keeps ([`Backend::take_unique`](super::Backend::take_unique),
//! [`Backend::release_unique`](super::Backend::release_unique)):
//! - at most one job holds a lock at a time; taking a lock its holder already holds (a
//!   take sent twice over a reconnect) answers [`Taken::Ours`];
//! - a lock ends by itself `for` after it was taken, whatever its holder does, so a host
//!   that dies holding one keeps the key for at most `for`;
//! - a release lets go of a lock only when the given job holds it, never another's.

use std::time::Duration;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::BrokerError;
use crate::job::MAX_HOLD_DELAY;

/// The longest unique key, in bytes: a key is hashed, never sent, but a key longer than
/// this is a mistake (a whole payload, say) rather than a key.
pub const UNIQUE_KEY_MAX: usize = 1024;

/// The longest a lock can last: the broker's longest message TTL, as for a hold queue.
pub const UNIQUE_FOR_MAX: Duration = MAX_HOLD_DELAY;

const PREFIX: &str = "jobhost.unique.";

/// Hex digits of the hash in a lock's name: 128 bits, so two keys never share a lock.
const HASH_HEX: usize = 32;

/// The lock of one (job type, key) for one length of time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UniqueLock {
    name: String,
    for_ms: u64,
}

/// What taking a lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The job holds the lock now (or held it already).
    Ours,
    /// Another job holds it: its id, when the broker could tell it in that instant.
    HeldBy(Option<Uuid>),
}

impl UniqueLock {
    /// The lock of `key` among the jobs of `job_type`, held for at most `for_`. A key
    /// that is empty or longer than [`UNIQUE_KEY_MAX`] bytes, or a `for_` under a
    /// millisecond or over [`UNIQUE_FOR_MAX`], is refused.
    pub fn new(job_type: &str, key: &str, for_: Duration) -> Result<Self, BrokerError> {
        let invalid = |reason: String| BrokerError::InvalidUnique { reason };
        if key.is_empty() || key.len() > UNIQUE_KEY_MAX {
            return Err(invalid(format!(
                "a unique key of {} bytes; it must have 1 to {UNIQUE_KEY_MAX}",
                key.len()
            )));
        }
        if for_ < Duration::from_millis(1) || for_ > UNIQUE_FOR_MAX {
            return Err(invalid(format!(
                "a unique `for` of {for_:?}; it must be 1ms to {UNIQUE_FOR_MAX:?}"
            )));
        }
        let mut hash = Sha256::new();
        // The length first, so ("ab", "c") and ("a", "bc") hash apart.
        hash.update((job_type.len() as u64).to_le_bytes());
        hash.update(job_type.as_bytes());
        hash.update(key.as_bytes());
        let hex: String = hash.finalize()[..HASH_HEX / 2]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let for_ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX);
        Ok(Self {
            name: format!("{PREFIX}{hex}.{for_ms}"),
            for_ms,
        })
    }

    /// The lock an envelope's `unique_lock` names, when it names one as
    /// [`UniqueLock::new`] writes it; `None` for anything else, so a message cannot make a
    /// host touch a queue that is not a lock.
    pub fn parse(name: &str) -> Option<Self> {
        let (hex, for_ms) = name.strip_prefix(PREFIX)?.split_once('.')?;
        let hex_ok = hex.len() == HASH_HEX
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let digits_ok = !for_ms.is_empty() && for_ms.bytes().all(|b| b.is_ascii_digit());
        let for_ms: u64 = for_ms.parse().ok().filter(|_| hex_ok && digits_ok)?;
        let max = u64::try_from(UNIQUE_FOR_MAX.as_millis()).unwrap_or(u64::MAX);
        (1..=max).contains(&for_ms).then(|| Self {
            name: name.to_owned(),
            for_ms,
        })
    }

    /// Its name: the lock queue's on RabbitMQ, the envelope's `unique_lock`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long it lasts once taken.
    pub fn lasts(&self) -> Duration {
        Duration::from_millis(self.for_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MINUTES: Duration = Duration::from_secs(600);

    #[test]
    fn a_lock_is_named_by_a_hash_of_its_job_type_and_key_and_by_its_length() {
        let lock = UniqueLock::new("emails.Send", "customer-1", TEN_MINUTES).expect("valid");
        assert!(
            lock.name().starts_with("jobhost.unique."),
            "{}",
            lock.name()
        );
        assert!(lock.name().ends_with(".600000"), "{}", lock.name());
        assert_eq!(lock.name().len(), PREFIX.len() + HASH_HEX + ".600000".len());
        let again = UniqueLock::new("emails.Send", "customer-1", TEN_MINUTES).expect("valid");
        assert_eq!(lock, again, "the same key takes the same lock");
        for other in [
            UniqueLock::new("emails.Send", "customer-2", TEN_MINUTES),
            UniqueLock::new("emails.Other", "customer-1", TEN_MINUTES),
            UniqueLock::new("emails.Sen", "dcustomer-1", TEN_MINUTES),
            UniqueLock::new("emails.Send", "customer-1", Duration::from_secs(60)),
        ] {
            assert_ne!(other.expect("valid"), lock);
        }
    }

    #[test]
    fn a_hostile_key_never_reaches_the_name_and_an_oversized_one_is_refused() {
        let lock = UniqueLock::new("t", "\u{0}\n\u{202e}../amq.x", TEN_MINUTES).expect("valid");
        assert!(
            lock.name()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.'),
            "{}",
            lock.name()
        );
        let huge = "k".repeat(1 << 20);
        let err = UniqueLock::new("t", &huge, TEN_MINUTES).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "invalid unique key: a unique key of 1048576 bytes; it must have 1 to 1024"
        );
        assert!(UniqueLock::new("t", "", TEN_MINUTES).is_err());
        assert!(UniqueLock::new("t", "k", Duration::ZERO).is_err());
        assert!(UniqueLock::new("t", "k", UNIQUE_FOR_MAX + Duration::from_millis(1)).is_err());
        assert!(UniqueLock::new("t", "k", UNIQUE_FOR_MAX).is_ok());
    }

    #[test]
    fn only_a_name_written_as_a_lock_parses_as_one() {
        let lock = UniqueLock::new("t", "k", TEN_MINUTES).expect("valid");
        assert_eq!(UniqueLock::parse(lock.name()), Some(lock.clone()));
        assert_eq!(
            UniqueLock::parse(lock.name()).map(|l| l.lasts()),
            Some(TEN_MINUTES)
        );
        let hex = &lock.name()[PREFIX.len()..PREFIX.len() + HASH_HEX];
        for name in [
            "app.emails".to_owned(),
            "app.emails.dead".to_owned(),
            format!("{PREFIX}{hex}"),
            format!("{PREFIX}{hex}.0"),
            format!("{PREFIX}{hex}.+5"),
            format!("{PREFIX}{hex}.99999999999"),
            format!("{PREFIX}{}.600000", hex.to_uppercase()),
            format!("{PREFIX}{}.600000", &hex[1..]),
            format!("{PREFIX}{hex}.600000.x"),
        ] {
            assert_eq!(UniqueLock::parse(&name), None, "{name}");
        }
    }
}
