//! A moment shown as people and logs read it: [`Utc`], milliseconds since the Unix epoch
//! as RFC 3339 in UTC, to the second. Any `u64` renders (years past 9999 with more
//! digits), because the moments shown come from producers and operators.

use std::fmt;

/// Milliseconds since the Unix epoch, shown as RFC 3339 UTC to the second.
#[derive(Debug, Clone, Copy)]
pub struct Utc(pub u64);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1000;
        let (days, rest) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60
        )
    }
}

/// The calendar date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`), by
/// hand rather than by chrono, whose calendar ends at year 262143: a deadline a producer
/// wrote may be any `u64`. In unsigned arithmetic, because no day precedes the epoch here:
/// `days` is at most about 2.1e11, far from overflowing a `u64`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_renders_as_rfc_3339_in_utc_whatever_its_year() {
        assert_eq!(Utc(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(Utc(951_782_400_000).to_string(), "2000-02-29T00:00:00Z");
        assert_eq!(Utc(u64::MAX).to_string(), "584556019-04-03T14:25:51Z");
    }
}
