//! Periodic jobs a job type declares: the fleet enqueues one job of the type per tick,
//! exactly once across every host on the broker (docs/schedules.md).
//!
//! ```text
//! #[job(queue = ..., cron = "0 7 * * *", tz = "Europe/Paris", payload = r#"{"kind":"daily"}"#)]
//! #[job(queue = ..., every = "30s", catch_up = 10)]
//! ```
//!
//! The derive checks what it can when the plugin compiles (exactly one of `cron` and
//! `every`, `tz` only with `cron`, `every` at least [`EVERY_MIN`], `catch_up` at most
//! [`CATCH_UP_MAX`]); the host checks the rest when it loads the plugin (the cron
//! expression, the time zone, the payload's JSON and size) and refuses the plugin naming
//! what is wrong. The operator's grants file may replace or disable a plugin's schedule by
//! a `[schedules."JOB_TYPE"]` section of the job type's name.

use std::time::Duration;

/// The shortest `every`.
pub const EVERY_MIN: Duration = Duration::from_secs(1);

/// The most missed ticks a schedule may fire late.
pub const CATCH_UP_MAX: u32 = 1000;

/// A job type's periodic schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// When it fires.
    pub timing: Timing,
    /// The JSON payload of each firing's job; `{}` unless the job says otherwise.
    pub payload: String,
    /// How many ticks no host fired in time are fired late, newest first; 0 lets them go.
    pub catch_up: u32,
}

/// When a [`Schedule`] fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timing {
    /// At each match of a cron expression (five fields, or six with seconds first) in an
    /// IANA time zone (`UTC` when empty).
    Cron {
        /// The expression.
        expression: String,
        /// The time zone its fields are read in.
        tz: String,
    },
    /// At every multiple of the period since the Unix epoch.
    Every(Duration),
}
