//! Rate limits the operator sets in the grants file, fleet-wide: at most so many jobs of a
//! queue, or of one key of a job type, start per second, minute or hour across every host
//! on the broker, with a burst (see docs/flow-control.md, "Rate limits"). As for the caps,
//! reloaded with the rest of the file, overriding what a plugin declares, and written by
//! the SDK's rules (`jobhost_sdk::limits`).
//!
//! ```toml
//! [queues."emails"]
//! rate = "50/s"                                          # also "10/m", "1000/h"
//! burst = 50                                             # default: the rate's count
//! [jobs."email.Send"]
//! rate = { key = "customer_id", limit = "10/s", burst = 5, respect_retry_after = true }
//! [jobs."report.Build"]
//! rate = { limit = "100/m" }                             # the job type as a whole
//! ```
//!
//! # Contract
//! - A rate is `COUNT/UNIT`: a count of 1..=[`MAX_RATE_COUNT`], a unit of `s`, `m` or `h`,
//!   and at most [`MAX_PER_SECOND`] jobs a second in all; a burst is 1..=[`MAX_BURST`].
//!   Anything else refuses the file with its line.
//! - A key is read from the payload exactly as a cap's ([`key_of`](super::key_of)): a payload
//!   without the field shares one bucket of its job type.
//! - `respect_retry_after` (default `false`): a job of a key deferred for a called service's
//!   `Retry-After` holds the key's tokens back as long (`worker::rates`).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::GrantsError;
use super::caps::{self, JobSection, QueueSection};
use super::file::Lines;
use crate::text::{self, NAME_MAX};

pub use jobhost_sdk::limits::{KeyRate, MAX_BURST, MAX_PER_SECOND, MAX_RATE_COUNT, Rate, RateUnit};

/// Every rate limit of the grants file, by queue and by job type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rates {
    queues: BTreeMap<String, Rate>,
    jobs: BTreeMap<String, KeyRate>,
}

impl Rates {
    /// The rate limit of `queue`, if the file sets one.
    pub fn queue(&self, queue: &str) -> Option<Rate> {
        self.queues.get(queue).copied()
    }

    /// The per-key rate limit of `job_type`, if the file sets one.
    pub fn job(&self, job_type: &str) -> Option<&KeyRate> {
        self.jobs.get(job_type)
    }

    /// Whether the file sets no rate limit at all.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.jobs.is_empty()
    }
}

/// `rate = { key = "...", limit = "10/s", burst = 5, respect_retry_after = true }` of a
/// `[jobs.TYPE]` section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyRateEntry {
    key: Option<Spanned<String>>,
    limit: Spanned<String>,
    burst: Option<Spanned<i64>>,
    #[serde(default)]
    respect_retry_after: bool,
}

/// Check the rate limits of the `[queues]` and `[jobs]` sections of a grants file.
pub(super) fn parse(
    lines: &Lines<'_>,
    queues: &BTreeMap<Spanned<String>, QueueSection>,
    jobs: &BTreeMap<Spanned<String>, JobSection>,
) -> Result<Rates, GrantsError> {
    let mut rates = Rates::default();
    for (name, section) in queues {
        let name = caps::section_name(lines, name.clone(), "queue")?;
        match (&section.rate, &section.burst) {
            (Some(rate), burst) => {
                let rate = parse_rate(lines, rate, burst.as_ref(), &name)?;
                rates.queues.insert(name, rate);
            }
            (None, Some(burst)) => {
                return Err(lines.error(
                    burst.span(),
                    format!("burst of `{name}` without a rate: set `rate` too"),
                ));
            }
            (None, None) => {}
        }
    }
    for (name, section) in jobs {
        let name = caps::section_name(lines, name.clone(), "job type")?;
        let Some(entry) = &section.rate else {
            continue;
        };
        let entry = entry.get_ref();
        let key = entry
            .key
            .as_ref()
            .map(|key| caps::key_name(lines, key, "rate", &name))
            .transpose()?;
        let rate = parse_rate(lines, &entry.limit, entry.burst.as_ref(), &name)?;
        let respect_retry_after = entry.respect_retry_after;
        rates.jobs.insert(
            name,
            KeyRate {
                key,
                rate,
                respect_retry_after,
            },
        );
    }
    Ok(rates)
}

fn parse_rate(
    lines: &Lines<'_>,
    rate: &Spanned<String>,
    burst: Option<&Spanned<i64>>,
    of: &str,
) -> Result<Rate, GrantsError> {
    let text = rate.get_ref();
    let limit = Rate::parse(text).map_err(|why| {
        lines.error(
            rate.span(),
            format!("rate `{}` of `{of}`: {why}", text::bounded(text, NAME_MAX)),
        )
    })?;
    let Some(burst) = burst else {
        return Ok(limit);
    };
    limit
        .with_burst(*burst.get_ref())
        .map_err(|why| lines.error(burst.span(), format!("burst of `{of}` {why}")))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::grants::Grants;

    fn rates(text: &str) -> Result<Rates, String> {
        Grants::parse(Path::new("jobhost.toml"), text)
            .map(|grants| grants.rates().clone())
            .map_err(|err| err.to_string())
    }

    #[test]
    fn queue_and_key_rates_are_read_next_to_the_caps() {
        let both = rates(
            "[queues.\"emails\"]\nconcurrency = 4\nrate = \"50/s\"\nburst = 20\n\
             [jobs.\"email.Send\"]\nrate = { key = \"customer_id\", limit = \"10/m\" }\n\
             [jobs.\"api.Call\"]\nrate = { key = \"k\", limit = \"1/s\", respect_retry_after = true }\n\
             [jobs.\"report.Build\"]\nrate = { limit = \"100/m\" }\n\
             [queues.\"other\"]\nrate = \"1000/h\"\n",
        )
        .expect("valid");
        let emails = both.queue("emails").expect("a queue rate");
        assert_eq!((emails.shown(), emails.burst), ("50/s".into(), 20));
        assert_eq!(emails.interval(), std::time::Duration::from_millis(20));
        let other = both.queue("other").expect("a queue rate");
        assert_eq!((other.shown(), other.burst), ("1000/h".into(), 1000));
        let send = both.job("email.Send").expect("a key rate");
        assert_eq!(send.key.as_deref(), Some("customer_id"));
        assert_eq!((send.rate.shown(), send.rate.burst), ("10/m".into(), 10));
        assert!(!send.respect_retry_after, "not unless the file says so");
        let call = both.job("api.Call").expect("a key rate");
        assert!(call.respect_retry_after);
        let build = both.job("report.Build").expect("a job type's rate");
        assert_eq!(
            (build.key.as_deref(), build.rate.shown()),
            (None, "100/m".into())
        );
        assert_eq!(both.queue("nowhere"), None);
    }

    #[test]
    fn a_section_with_only_a_rate_caps_nothing() {
        let grants = Grants::parse(Path::new("jobhost.toml"), "[queues.q]\nrate = \"5/s\"\n")
            .expect("valid");
        assert!(grants.caps().is_empty());
        assert!(!grants.rates().is_empty());
    }

    #[test]
    fn out_of_range_rates_and_bursts_are_refused_with_their_line() {
        for (text, wanted) in [
            (
                "[queues.q]\n\nrate = \"999999999999/s\"\n",
                "line 3: rate `999999999999/s` of `q`: the count must be 1 to 100000",
            ),
            (
                "[queues.q]\nrate = \"0/s\"\n",
                "line 2: rate `0/s` of `q`: the count must be 1",
            ),
            (
                "[queues.q]\nrate = \"1/0s\"\n",
                "line 2: rate `1/0s` of `q`: the unit must be `s`, `m` or `h`",
            ),
            (
                "[queues.q]\nrate = \"10\"\n",
                "line 2: rate `10` of `q`: write it as COUNT/UNIT",
            ),
            (
                "[queues.q]\nrate = \"-1/s\"\n",
                "line 2: rate `-1/s` of `q`: the count must be",
            ),
            (
                "[queues.q]\nrate = \"1001/s\"\n",
                "line 2: rate `1001/s` of `q`: at most 1000 jobs a second",
            ),
            (
                "[queues.q]\nrate = \"5/s\"\nburst = 0\n",
                "line 3: burst of `q` is 0; it must be 1 to 10000",
            ),
            (
                "[queues.q]\nrate = \"5/s\"\nburst = 10001\n",
                "line 3: burst of `q` is 10001",
            ),
            (
                "[queues.q]\nburst = 3\n",
                "line 2: burst of `q` without a rate",
            ),
            ("[queues.q]\nrate = 5\n", "line 2: invalid type"),
            (
                "[jobs.t]\nrate = { key = \"a b\", limit = \"1/s\" }\n",
                "line 2: rate key `a b` of job type `t`",
            ),
            (
                "[jobs.t]\nrate = { key = \"k\", limit = \"1/d\" }\n",
                "line 2: rate `1/d` of `t`: the unit",
            ),
            (
                "[jobs.t]\nrate = { key = \"k\", limit = \"1/s\", burst = -2 }\n",
                "line 2: burst of `t` is -2",
            ),
            (
                "[jobs.t]\nrate = { key = \"k\" }\n",
                "line 2: missing field `limit`",
            ),
            (
                "[jobs.t]\nrate = { key = \"k\", limit = \"1/s\", respect_retry_after = 1 }\n",
                "line 2: invalid type",
            ),
        ] {
            let err = rates(text).expect_err(text);
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_large_count_per_hour_saves_up_no_more_than_the_largest_burst() {
        let rates = rates("[queues.q]\nrate = \"100000/h\"\n").expect("valid");
        assert_eq!(rates.queue("q").map(|rate| rate.burst), Some(MAX_BURST));
    }
}
