//! Fleet-wide limits on a queue or on each key of a job type: how many of its jobs run at
//! once (a concurrency cap) and how many start per second, minute or hour (a rate limit,
//! with a burst), across every host on the broker.
//!
//! A plugin declares them in `#[queue(...)]` and `#[job(...)]`; the operator's grants file
//! sets or overrides them (docs/flow-control.md). Both are written in one grammar with one
//! set of bounds, the rules here: checked when a plugin compiles (the derives compile this
//! file in), again when the host loads the plugin, and when the host reads its grants file.
//!
//! ```text
//! #[queue(concurrency = 4, rate = "50/s", burst = 50)]
//! #[job(queue = ..., concurrency(key = "customer_id", limit = 2),
//!       rate(key = "customer_id", limit = "10/s", burst = 5))]
//! #[job(queue = ..., rate(limit = "100/m"))]          // the job type as a whole
//! ```

use std::time::Duration;

/// The largest cap: at most this many jobs of a queue, or of one key, run at once.
pub const MAX_CONCURRENCY: u32 = 1000;

/// The largest count of a rate.
pub const MAX_RATE_COUNT: u32 = 100_000;

/// The fastest rate, in jobs a second.
pub const MAX_PER_SECOND: u32 = 1000;

/// The largest burst: a bucket saves up at most this many jobs.
pub const MAX_BURST: u32 = 10_000;

/// The longest key field name.
pub const KEY_NAME_MAX: usize = 64;

/// The limits of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// Jobs of the queue running at once, fleet-wide.
    pub concurrency: Option<u32>,
    /// Jobs of the queue starting per unit, fleet-wide.
    pub rate: Option<Rate>,
}

/// The limits of each key of one job type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobLimits {
    /// Jobs of one key running at once, fleet-wide.
    pub concurrency: Option<KeyCap>,
    /// Jobs of one key starting per unit, fleet-wide.
    pub rate: Option<KeyRate>,
    /// At most one job of a key queued, held or running at once.
    pub unique: Option<UniqueKey>,
}

/// Unique jobs per key of one job type: while a job whose payload holds one value under
/// `key` is queued, held or running (for at most `for_` after it was enqueued), another
/// enqueue of that value is refused and answers the existing job's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// The payload's top-level field whose value is the key.
    pub key: String,
    /// How long a job holds its key at most: 1 ms to the longest hold (`MAX_DELAY`).
    pub for_: Duration,
}

/// A cap per key of one job type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCap {
    /// The payload's top-level field whose value is the key.
    pub key: String,
    /// Jobs of one key running at once, fleet-wide.
    pub limit: u32,
}

/// A rate limit per key of one job type, or of the job type as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRate {
    /// The payload's top-level field whose value is the key; `None` limits the job type's
    /// jobs as a whole.
    pub key: Option<String>,
    /// The limit of each key.
    pub rate: Rate,
    /// Whether a job of a key deferred by a service's `Retry-After`
    /// ([`JobError::retry_after`](crate::JobError::retry_after)) holds the key's other jobs
    /// back as long, fleet-wide, so they wait instead of each hitting the wall.
    pub respect_retry_after: bool,
}

/// A rate limit: `count` jobs per `unit`, at most `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Jobs per unit.
    pub count: u32,
    /// The unit of time.
    pub unit: RateUnit,
    /// Jobs saved up at most.
    pub burst: u32,
}

/// The unit of a [`Rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateUnit {
    /// `s`.
    Second,
    /// `m`.
    Minute,
    /// `h`.
    Hour,
}

impl Rate {
    /// `COUNT/UNIT` (`10/s`, `10/m`, `1000/h`): a count of 1 to [`MAX_RATE_COUNT`], at most
    /// [`MAX_PER_SECOND`] jobs a second, and a burst of the count (at most [`MAX_BURST`]).
    /// The error says what is wrong, for the caller to prefix with what it reads.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (count, unit) = text
            .split_once('/')
            .ok_or("write it as COUNT/UNIT, e.g. `10/s`, `10/m` or `10/h`")?;
        let unit = match unit {
            "s" => RateUnit::Second,
            "m" => RateUnit::Minute,
            "h" => RateUnit::Hour,
            _ => return Err("the unit must be `s`, `m` or `h`".to_owned()),
        };
        let count = count
            .parse::<u32>()
            .ok()
            .filter(|count| (1..=MAX_RATE_COUNT).contains(count))
            .ok_or_else(|| format!("the count must be 1 to {MAX_RATE_COUNT}"))?;
        let rate = Self {
            count,
            unit,
            burst: count.min(MAX_BURST),
        };
        if rate.interval() < Duration::from_secs(1) / MAX_PER_SECOND {
            return Err(format!("at most {MAX_PER_SECOND} jobs a second"));
        }
        Ok(rate)
    }

    /// The same rate with `burst`, which must be 1 to [`MAX_BURST`]; the error says what is
    /// wrong with the number, for the caller to prefix with what it reads.
    pub fn with_burst(self, burst: i64) -> Result<Self, String> {
        let burst = u32::try_from(burst)
            .ok()
            .filter(|n| (1..=MAX_BURST).contains(n))
            .ok_or_else(|| format!("is {burst}; it must be 1 to {MAX_BURST}"))?;
        Ok(Self { burst, ..self })
    }

    /// The unit's length.
    pub fn per(&self) -> Duration {
        match self.unit {
            RateUnit::Second => Duration::from_secs(1),
            RateUnit::Minute => Duration::from_secs(60),
            RateUnit::Hour => Duration::from_secs(3600),
        }
    }

    /// The time one job's token takes to come: the unit over the count.
    pub fn interval(&self) -> Duration {
        self.per() / self.count
    }

    /// As written: `10/s`.
    pub fn shown(&self) -> String {
        let unit = match self.unit {
            RateUnit::Second => 's',
            RateUnit::Minute => 'm',
            RateUnit::Hour => 'h',
        };
        format!("{}/{unit}", self.count)
    }
}

/// A concurrency cap of 1 to [`MAX_CONCURRENCY`].
pub fn check_concurrency(limit: i64) -> Result<u32, String> {
    u32::try_from(limit)
        .ok()
        .filter(|n| (1..=MAX_CONCURRENCY).contains(n))
        .ok_or_else(|| format!("is {limit}; it must be 1 to {MAX_CONCURRENCY}"))
}

/// A key field name: 1 to [`KEY_NAME_MAX`] ASCII letters, digits, `_` or `-`.
pub fn check_key(key: &str) -> Result<(), String> {
    let valid = !key.is_empty()
        && key.len() <= KEY_NAME_MAX
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "it must be 1 to {KEY_NAME_MAX} ASCII letters, digits, `_` or `-`, the name of a \
             top-level payload field"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_count_per_second_minute_or_hour_with_the_count_as_its_burst() {
        let rate = Rate::parse("10/s").expect("valid");
        assert_eq!(
            (rate.count, rate.unit, rate.burst),
            (10, RateUnit::Second, 10)
        );
        assert_eq!(rate.interval(), Duration::from_millis(100));
        assert_eq!(
            Rate::parse("90/m").expect("valid").interval(),
            Duration::from_secs(60) / 90
        );
        assert_eq!(Rate::parse("100000/h").expect("valid").burst, MAX_BURST);
        assert_eq!(Rate::parse("7/h").expect("valid").shown(), "7/h");
    }

    #[test]
    fn out_of_range_rates_bursts_caps_and_keys_are_refused_saying_why() {
        for (text, why) in [
            ("10", "COUNT/UNIT"),
            ("10/d", "`s`, `m` or `h`"),
            ("0/s", "1 to 100000"),
            ("100001/h", "1 to 100000"),
            ("1001/s", "at most 1000 jobs a second"),
        ] {
            let error = Rate::parse(text).expect_err(text);
            assert!(error.contains(why), "{text}: {error}");
        }
        let rate = Rate::parse("10/s").expect("valid");
        assert_eq!(rate.with_burst(5).expect("valid").burst, 5);
        assert!(rate.with_burst(0).is_err() && rate.with_burst(10_001).is_err());
        assert_eq!(check_concurrency(4), Ok(4));
        assert!(check_concurrency(0).is_err() && check_concurrency(1001).is_err());
        assert!(check_key("customer_id").is_ok());
        for key in ["", "a.b", "ä", &"k".repeat(65)] {
            assert!(check_key(key).is_err(), "{key:?}");
        }
    }
}
