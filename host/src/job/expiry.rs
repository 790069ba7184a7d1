//! When a job stops being worth running: the deadline an enqueue gives it, and what the
//! worker found when a start of the job would come at or after it.
//!
//! # Contract
//! - A [`Deadline`] is a Unix epoch millisecond, as producers write it (`expires_at_ms`):
//!   a job is expired from that millisecond on. Every value is valid: `0` is a deadline
//!   long past (the job expires when it is delivered), `u64::MAX` one that never comes.
//!   No arithmetic on it can overflow: sums saturate, differences are taken only from the
//!   later time.
//! - The host compares deadlines with its own wall clock ([`now_ms`]), the clock producers
//!   read when they set them. A producer whose clock runs ahead of the host's gives its
//!   jobs that much longer; one that runs behind, that much less.
//! - [`Expired`] is the whole story of an expiry; its `Display` is the reason its dead
//!   letter carries, rendered from it and never parsed back.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::Utc;

/// The moment a job expires, in milliseconds since the Unix epoch; see the [module
/// doc](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Deadline(u64);

impl Deadline {
    /// The deadline `expires_in` from now on the host's clock; a length past the end of
    /// time is a deadline that never comes.
    pub fn from_now(expires_in: Duration) -> Self {
        Self(now_plus(expires_in))
    }

    /// The deadline at `ms` milliseconds since the Unix epoch.
    pub fn from_epoch_ms(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub fn epoch_ms(self) -> u64 {
        self.0
    }

    /// What a start of the job at `at_ms` would be: expired when that is the deadline or
    /// later, as `start` says which start it is.
    pub fn check(self, at_ms: u64, start: impl FnOnce() -> Start) -> Result<(), Expired> {
        if at_ms < self.0 {
            return Ok(());
        }
        Err(Expired {
            deadline: self,
            at_ms,
            start: start(),
        })
    }
}

/// RFC 3339 in UTC, to the second: `2026-12-07T08:01:02Z`.
impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Utc(self.0).fmt(f)
    }
}

/// A job whose start would come at or after its deadline, so it is not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The job's deadline.
    pub deadline: Deadline,
    /// When the start would be, in milliseconds since the Unix epoch: the delivery's
    /// moment, or the end of a retry's or deferral's hold.
    pub at_ms: u64,
    /// Which start it was.
    pub start: Start,
}

/// Which start of a job would have come after its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The job was delivered after its deadline.
    Delivery,
    /// Its attempt failed, and the retry's hold would end after the deadline.
    Retry {
        /// Why the attempt failed, as the handler's `JobError` renders it.
        failure: String,
    },
    /// The handler deferred it, and the hold would end after the deadline.
    Deferral,
}

impl Expired {
    /// How long after the deadline the start would be.
    pub fn late_by(&self) -> Duration {
        Duration::from_millis(self.at_ms.saturating_sub(self.deadline.0))
    }
}

/// The reason the dead letter carries, e.g. `expired: delivered at 2026-12-07T08:04:02Z,
/// 3m after its deadline 2026-12-07T08:01:02Z`.
impl fmt::Display for Expired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expired: ")?;
        match &self.start {
            Start::Delivery => f.write_str("delivered at ")?,
            Start::Retry { .. } => f.write_str("its retry would start at ")?,
            Start::Deferral => f.write_str("its deferral would end at ")?,
        }
        Utc(self.at_ms).fmt(f)?;
        write!(f, ", ")?;
        late(self.late_by(), f)?;
        write!(f, " after its deadline {}", self.deadline)?;
        if let Start::Retry { failure } = &self.start {
            write!(f, "; it failed with: {failure}")?;
        }
        Ok(())
    }
}

/// The host's wall clock, in milliseconds since the Unix epoch (0 before it, `u64::MAX`
/// past the end of `u64`).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The host's wall clock `later` from now, in milliseconds since the Unix epoch,
/// saturating at `u64::MAX`.
pub(crate) fn now_plus(later: Duration) -> u64 {
    now_ms().saturating_add(u64::try_from(later.as_millis()).unwrap_or(u64::MAX))
}

/// A lateness in its two largest units, as people say it: `250ms`, `3m`, `1h5m`, `2d3h`.
fn late(late: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
    if ms < 1000 {
        return write!(f, "{ms}ms");
    }
    let seconds = ms / 1000;
    let units = [
        (seconds / 86_400, "d"),
        (seconds / 3600 % 24, "h"),
        (seconds / 60 % 60, "m"),
        (seconds % 60, "s"),
    ];
    let first = units.iter().position(|&(n, _)| n > 0).unwrap_or(3);
    for &(n, unit) in &units[first..(first + 2).min(units.len())] {
        if n > 0 {
            write!(f, "{n}{unit}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-07T08:01:02Z.
    const DEADLINE_MS: u64 = 1_796_630_462_000;

    fn expired(at_ms: u64, start: Start) -> Expired {
        Deadline::from_epoch_ms(DEADLINE_MS)
            .check(at_ms, || start)
            .expect_err("at or after the deadline")
    }

    #[test]
    fn a_start_before_the_deadline_is_on_time_and_one_at_or_after_it_is_expired() {
        let deadline = Deadline::from_epoch_ms(DEADLINE_MS);
        assert_eq!(deadline.check(DEADLINE_MS - 1, || Start::Delivery), Ok(()));
        assert_eq!(
            expired(DEADLINE_MS, Start::Delivery).late_by(),
            Duration::ZERO
        );
        assert_eq!(
            expired(DEADLINE_MS + 1, Start::Deferral).late_by(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn each_expiry_renders_when_the_start_would_be_how_late_and_the_deadline() {
        let cases = [
            (
                expired(DEADLINE_MS + 180_000, Start::Delivery),
                "expired: delivered at 2026-12-07T08:04:02Z, 3m after its deadline \
                 2026-12-07T08:01:02Z",
            ),
            (
                expired(
                    DEADLINE_MS + 3_900_500,
                    Start::Retry {
                        failure: "job failed (retryable): down".into(),
                    },
                ),
                "expired: its retry would start at 2026-12-07T09:06:02Z, 1h5m after its \
                 deadline 2026-12-07T08:01:02Z; it failed with: job failed (retryable): down",
            ),
            (
                expired(DEADLINE_MS + 250, Start::Deferral),
                "expired: its deferral would end at 2026-12-07T08:01:02Z, 250ms after its \
                 deadline 2026-12-07T08:01:02Z",
            ),
        ];
        for (expired, reason) in cases {
            assert_eq!(expired.to_string(), reason);
        }
    }

    #[test]
    fn any_deadline_a_producer_writes_renders_without_overflow() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400_000, "2000-02-29T00:00:00Z"),
            (253_402_300_799_000, "9999-12-31T23:59:59Z"),
            (u64::MAX, "584556019-04-03T14:25:51Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(Deadline::from_epoch_ms(ms).to_string(), text, "{ms}");
        }
        let ancient = Deadline::from_epoch_ms(0)
            .check(u64::MAX, || Start::Delivery)
            .expect_err("expired");
        assert!(
            ancient.to_string().contains("213503982334d14h after"),
            "{ancient}"
        );
    }

    #[test]
    fn a_deadline_from_now_saturates_instead_of_overflowing() {
        assert_eq!(Deadline::from_now(Duration::MAX), Deadline(u64::MAX));
        let soon = Deadline::from_now(Duration::from_secs(600)).epoch_ms();
        let now = now_ms();
        assert!(
            (now + 599_000..=now + 600_000).contains(&soon),
            "{soon} is ten minutes after {now}"
        );
    }
}
