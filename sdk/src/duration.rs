//! The one duration grammar of jobhost: `"500ms"`, `"30s"`, `"2 m"`, `"30"`, `"1d"`, and
//! [`MAX_DELAY`], the longest wait a job can be held for.
//!
//! Std-only on purpose: the derives compile this same file into `jobhost-macros` (with
//! `#[path]`) to check durations at compile time, and the host reuses it for flags like
//! `--delay 30s`, so attributes and command lines can never disagree on what a duration is.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// The units a duration may carry, with their length in milliseconds.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// The longest delay any retry wait, deferral or follow-up delay may have: 2^31 - 1 ms,
/// about 24.8 days.
///
/// Because every such wait happens in a broker hold queue whose `x-message-ttl` is the
/// delay and whose `x-expires` is twice that, and RabbitMQ caps both at 2^32 - 1 ms, no
/// hold queue can hold a job longer. The derives refuse longer constant waits at compile
/// time, [`JobError::deferred`](crate::JobError::deferred) turns a longer deferral into a
/// fatal error, and a follow-up enqueued with a longer delay is refused before it reaches
/// the host.
pub const MAX_DELAY: Duration = Duration::from_millis((u32::MAX / 2) as u64);

/// Parse a duration: an integer, optional whitespace, and an optional unit `ms`, `s`, `m`,
/// `h` or `d`. A bare integer means seconds; whitespace around the whole is ignored.
///
/// Rejected: an empty string, anything but ASCII digits before the unit (no sign, no
/// fraction), an unknown unit, zero (every duration in jobhost is a wait or a limit, and
/// a zero one is always a mistake), and a length above `u64::MAX` milliseconds.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = (&text[..digits_end], text[digits_end..].trim_start());
    if digits.is_empty() || !unit.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(DurationError::Malformed(input.to_owned()));
    }
    let unit_ms = match unit {
        "" => 1_000,
        _ => match UNITS.iter().find(|(name, _)| *name == unit) {
            Some(&(_, ms)) => ms,
            None => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: unit.to_owned(),
                });
            }
        },
    };
    // Digits only, so the sole way `parse` can fail is a number above `u64::MAX`.
    let count: u64 = digits
        .parse()
        .map_err(|_| DurationError::Overflow(input.to_owned()))?;
    if count == 0 {
        return Err(DurationError::Zero(input.to_owned()));
    }
    let ms = count
        .checked_mul(unit_ms)
        .ok_or_else(|| DurationError::Overflow(input.to_owned()))?;
    Ok(Duration::from_millis(ms))
}

/// Why [`parse_duration`] refused its input; each message quotes the input as written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// The input was empty or only whitespace.
    Empty,
    /// Not an integer followed by letters, e.g. `-5s`, `1.5s` or `1h30m`.
    Malformed(String),
    /// An integer followed by a unit that is none of `ms`, `s`, `m`, `h`, `d`.
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// The duration is zero.
    Zero(String),
    /// The duration exceeds `u64::MAX` milliseconds.
    Overflow(String),
}

// Written by hand rather than with `thiserror` because this file must stay std-only (see
// the module doc).
impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FORM: &str = "write an integer and an optional unit ms, s, m, h or d, \
                            e.g. `500ms`, `30s` or `2 m` (a bare integer means seconds)";
        match self {
            Self::Empty => write!(f, "empty duration: {FORM}"),
            Self::Malformed(input) => write!(f, "malformed duration `{input}`: {FORM}"),
            Self::UnknownUnit { input, unit } => {
                write!(
                    f,
                    "unknown unit `{unit}` in duration `{input}`: use ms, s, m, h or d"
                )
            }
            Self::Zero(input) => write!(f, "zero duration `{input}`: a duration must be positive"),
            Self::Overflow(input) => write!(
                f,
                "duration `{input}` overflows: at most {} milliseconds fit",
                u64::MAX
            ),
        }
    }
}

impl Error for DurationError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> Duration {
        parse_duration(input).unwrap_or_else(|err| panic!("`{input}` must parse: {err}"))
    }

    #[test]
    fn every_unit_scales_to_its_length() {
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("3h"), Duration::from_secs(3 * 3600));
        assert_eq!(ok("1d"), Duration::from_secs(86_400));
    }

    #[test]
    fn a_bare_integer_means_seconds() {
        assert_eq!(ok("30"), Duration::from_secs(30));
        assert_eq!(
            ok("007"),
            Duration::from_secs(7),
            "leading zeros are only digits"
        );
    }

    #[test]
    fn whitespace_is_allowed_between_the_number_and_the_unit_and_around_both() {
        assert_eq!(ok("2 m"), Duration::from_secs(120));
        assert_eq!(ok(" 5\tms "), Duration::from_millis(5));
    }

    #[test]
    fn zero_is_rejected_with_or_without_a_unit() {
        for input in ["0", "0s", "000ms", "0 d"] {
            assert_eq!(
                parse_duration(input),
                Err(DurationError::Zero(input.to_owned()))
            );
        }
    }

    #[test]
    fn anything_but_digits_then_letters_is_malformed() {
        for input in ["s", "-5s", "+5s", "1.5s", "1h30m", "5 s x", "5s!", "ten"] {
            assert_eq!(
                parse_duration(input),
                Err(DurationError::Malformed(input.to_owned())),
                "`{input}` is not an integer followed by a unit"
            );
        }
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("  "), Err(DurationError::Empty));
    }

    #[test]
    fn units_are_lowercase_and_from_the_list() {
        for (input, unit) in [("5sec", "sec"), ("5S", "S"), ("5us", "us"), ("1w", "w")] {
            assert_eq!(
                parse_duration(input),
                Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: unit.to_owned()
                })
            );
        }
    }

    #[test]
    fn the_limit_is_u64_max_milliseconds() {
        let max = u64::MAX.to_string();
        assert_eq!(ok(&format!("{max}ms")), Duration::from_millis(u64::MAX));
        let too_many_ms = "18446744073709551616ms";
        assert_eq!(
            parse_duration(too_many_ms),
            Err(DurationError::Overflow(too_many_ms.into()))
        );
        let too_many_s = format!("{}s", u64::MAX / 1000 + 1);
        assert_eq!(
            parse_duration(&too_many_s),
            Err(DurationError::Overflow(too_many_s.clone()))
        );
        assert_eq!(
            ok(&format!("{}d", u64::MAX / 86_400_000)).as_millis() % 86_400_000,
            0
        );
    }

    #[test]
    fn the_longest_delay_is_half_of_rabbitmqs_largest_ttl() {
        assert_eq!(MAX_DELAY, Duration::from_millis(2_147_483_647));
        assert_eq!(
            MAX_DELAY.as_millis() * 2 + 1,
            u128::from(u32::MAX),
            "twice the delay, the hold queue's `x-expires`, still fits RabbitMQ's limit"
        );
    }

    #[test]
    fn messages_quote_the_input_and_say_what_to_write() {
        let zero = parse_duration("0s")
            .expect_err("zero is rejected")
            .to_string();
        assert_eq!(zero, "zero duration `0s`: a duration must be positive");
        let unit = parse_duration("5w")
            .expect_err("weeks are no unit")
            .to_string();
        assert_eq!(
            unit,
            "unknown unit `w` in duration `5w`: use ms, s, m, h or d"
        );
        let malformed = parse_duration("1.5s")
            .expect_err("no fractions")
            .to_string();
        assert!(
            malformed.starts_with("malformed duration `1.5s`: write an integer"),
            "{malformed}"
        );
    }
}
