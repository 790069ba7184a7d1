//! A periodic job's schedule: when it fires (a cron expression in a time zone, or a fixed
//! period), the payload of its jobs and what becomes of the ticks no host was there to
//! fire. The operator writes one in the grants file (`[schedules."NAME"]`,
//! `crate::grants`), a plugin declares one on a job type (`#[job(cron = ..)]`); both are
//! read by the rules here and fired by `crate::schedule`.
//!
//! # Contract
//! - A tick is an instant in milliseconds since the Unix epoch: every host computes the
//!   same ticks from the same schedule, whatever its own time zone.
//! - `every = D` ticks at the multiples of D since the Unix epoch, so hosts agree on the
//!   ticks without talking; D is at least [`EVERY_MIN`].
//! - `cron` is five fields (minute to day of week) or six (seconds first), read by
//!   `croner` in the schedule's `tz`, an IANA name (default `UTC`). Daylight saving is
//!   handled as Vixie cron does: a fixed local time that does not exist that day (spring
//!   forward) fires once, at the first instant after the gap; a fixed local time that
//!   happens twice (fall back) fires once, on its first occurrence; a wildcard or step
//!   field (`*/15`) fires on each wall-clock match that exists, so the repeated hour
//!   gets its matches twice and the skipped hour none.
//! - A payload is at most [`PAYLOAD_MAX`] bytes of JSON; `catch_up` at most
//!   [`CATCH_UP_MAX`].

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

pub use jobhost_sdk::schedule::{CATCH_UP_MAX, EVERY_MIN};

use crate::text::{self, NAME_MAX};

/// The largest payload a schedule gives its jobs, as JSON.
pub const PAYLOAD_MAX: usize = 64 * 1024;

/// The longest schedule name: it is part of a queue name and of a metric label.
pub const SCHEDULE_NAME_MAX: usize = 100;

/// What a schedule's name must be.
pub const NAME_RULE: &str = "1 to 100 ASCII letters, digits, `-`, `_`, `.` or `:`";

/// One schedule, the operator's or a plugin's.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The job type each firing enqueues.
    pub job_type: String,
    /// When it fires.
    pub timing: Timing,
    /// The payload of each firing's job.
    pub payload: serde_json::Value,
    /// What becomes of the ticks no host fired in time.
    pub missed: Missed,
    /// Whether it fires at all; a disabled schedule keeps its history.
    pub enabled: bool,
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// At every multiple of this period since the Unix epoch.
    Every(Duration),
    /// At each match of a cron expression, in a time zone.
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// Where its fields are read.
        tz: Tz,
    },
}

/// What becomes of the ticks that passed while no host could fire them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// They are counted as missed and never fired.
    Skip,
    /// The most recent N of them are fired, oldest first; older ones are counted missed.
    CatchUp(u32),
}

impl Timing {
    /// The first tick strictly after `after_ms`; `None` when there is none (a cron
    /// expression that never matches again before the year 5000).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Self::Every(period) => {
                let period = i64::try_from(period.as_millis()).ok()?.max(1);
                after_ms
                    .div_euclid(period)
                    .checked_add(1)?
                    .checked_mul(period)
            }
            Self::Cron { cron, tz } => {
                let after: DateTime<Tz> = tz.timestamp_millis_opt(after_ms).single()?;
                let next = cron.find_next_occurrence(&after, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }

    /// The ticks in `(after_ms, until_ms]`: how many there are, and the last `keep` of them,
    /// oldest first. A cron expression is searched through [`SCAN_MAX`] ticks at most, the
    /// ones beyond counted as if they were there, because a down host of years should not
    /// make its successor spin.
    pub fn ticks_between(&self, after_ms: i64, until_ms: i64, keep: usize) -> (u64, Vec<i64>) {
        if let Self::Every(period) = self {
            let period = i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1);
            let count = until_ms.div_euclid(period) - after_ms.div_euclid(period);
            let count = u64::try_from(count).unwrap_or(0);
            let kept = count.min(keep as u64);
            let last = until_ms.div_euclid(period);
            let ticks = (0..kept)
                .rev()
                .map(|back| (last - back as i64) * period)
                .collect();
            return (count, ticks);
        }
        let mut ticks = std::collections::VecDeque::with_capacity(keep.min(64));
        let (mut count, mut at) = (0u64, after_ms);
        while let Some(next) = self.next_after(at).filter(|next| *next <= until_ms) {
            count += 1;
            if count as usize > SCAN_MAX {
                break;
            }
            if ticks.len() == keep {
                ticks.pop_front();
            }
            if keep > 0 {
                ticks.push_back(next);
            }
            at = next;
        }
        (count, ticks.into())
    }
}

/// How many ticks of a cron expression [`Timing::ticks_between`] walks through at most.
pub const SCAN_MAX: usize = 100_000;

/// Whether `name` may name a schedule ([`NAME_RULE`]).
pub fn schedule_name_rule(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= SCHEDULE_NAME_MAX
        && name
            .bytes()
            // `:` for the job types a plugin names by their Rust path, which name its
            // schedule.
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "schedule name `{}`: it must be {NAME_RULE}",
            text::bounded(name, NAME_MAX)
        ))
    }
}

/// The time zone called `name` (an IANA name such as `Europe/Paris`), or why there is none.
pub fn time_zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name)
        .map_err(|_| "not an IANA time zone name such as `Europe/Paris` or `UTC`".to_owned())
}

/// The cron expression `text`: five fields (minute hour day-of-month month day-of-week) or
/// six (seconds first); the error says what is wrong.
pub fn cron(text: &str) -> Result<Cron, String> {
    let fields = text.split_whitespace().count();
    if !(5..=6).contains(&fields) {
        return Err(format!("{fields} fields"));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(text)
        .map_err(|err| err.to_string())
}

/// The period `text` of an `every` (`30s`, `5m`), at least [`EVERY_MIN`].
pub fn every(text: &str) -> Result<Duration, String> {
    let period = jobhost_sdk::parse_duration(text).map_err(|err| err.to_string())?;
    every_period(period)
}

/// `period` as an `every`: at least [`EVERY_MIN`].
pub fn every_period(period: Duration) -> Result<Duration, String> {
    if period < EVERY_MIN {
        return Err(format!("it must be at least {EVERY_MIN:?}"));
    }
    Ok(period)
}

/// `json` as a schedule's payload: at most [`PAYLOAD_MAX`] bytes once written.
pub fn payload(json: serde_json::Value) -> Result<serde_json::Value, String> {
    let size = serde_json::to_vec(&json).map_or(usize::MAX, |bytes| bytes.len());
    if size > PAYLOAD_MAX {
        return Err(format!(
            "{size} bytes of JSON; it may have at most {PAYLOAD_MAX}"
        ));
    }
    Ok(json)
}
