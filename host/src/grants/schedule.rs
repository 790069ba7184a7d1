//! The operator's schedules: `[schedules."NAME"]` sections of the grants file, each a job
//! type, a payload, when it fires and what becomes of the ticks no host was there to fire,
//! read by the rules of [`crate::job::Schedule`].
//!
//! # Contract
//! - Parsing is strict and bounded: a name of [`NAME_RULE`](rules::NAME_RULE), a job type
//!   by the manifest's rule, a payload of at most [`PAYLOAD_MAX`](rules::PAYLOAD_MAX) bytes
//!   of JSON, `catch_up` at most [`CATCH_UP_MAX`], exactly one of `cron` and `every`, no unknown key; a refusal names
//!   the line.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::job::job_type_rule;
use crate::job::schedule::{
    self as rules, CATCH_UP_MAX, Missed, Schedule, Timing, schedule_name_rule,
};
use crate::text::{self, NAME_MAX};

/// A `[schedules."NAME"]` section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Section {
    job_type: Spanned<String>,
    cron: Option<Spanned<String>>,
    every: Option<Spanned<String>>,
    tz: Option<Spanned<String>>,
    payload: Option<Spanned<toml::Value>>,
    missed: Option<Spanned<toml::Value>>,
    #[serde(default = "enabled")]
    enabled: bool,
}

fn enabled() -> bool {
    true
}

/// What is wrong with a section: where in the file's text, and why.
pub(super) type Invalid = (Range<usize>, String);

/// The schedule `name` that `section` declares, checked as the [module doc](self) says.
pub(super) fn parse(
    name: &str,
    whole: Range<usize>,
    section: Section,
) -> Result<Schedule, Invalid> {
    schedule_name_rule(name).map_err(|reason| (whole.clone(), reason))?;
    let job_type = section.job_type.get_ref();
    job_type_rule(job_type).map_err(|reason| {
        (
            section.job_type.span(),
            format!(
                "job_type `{}` of schedule `{name}`: {reason}",
                text::bounded(job_type, NAME_MAX)
            ),
        )
    })?;
    let timing = parse_timing(name, whole, &section)?;
    let payload = match &section.payload {
        None => serde_json::Value::Object(serde_json::Map::new()),
        Some(payload) => parse_payload(name, payload)?,
    };
    let missed = match &section.missed {
        None => Missed::Skip,
        Some(missed) => parse_missed(name, missed)?,
    };
    Ok(Schedule {
        job_type: job_type.clone(),
        timing,
        payload,
        missed,
        enabled: section.enabled,
    })
}

/// When schedule `name` fires: exactly one of `cron` (in `tz`, UTC without one) and
/// `every` (which takes no `tz`).
fn parse_timing(name: &str, whole: Range<usize>, section: &Section) -> Result<Timing, Invalid> {
    let tz = match &section.tz {
        None => chrono_tz::Tz::UTC,
        Some(tz) => rules::time_zone(tz.get_ref()).map_err(|reason| {
            (
                tz.span(),
                format!(
                    "tz `{}` of schedule `{name}`: {reason}",
                    text::bounded(tz.get_ref(), NAME_MAX)
                ),
            )
        })?,
    };
    let timing = match (&section.cron, &section.every) {
        (Some(cron), None) => Timing::Cron {
            cron: Box::new(parse_cron(name, cron)?),
            tz,
        },
        (None, Some(every)) => {
            if let Some(tz) = &section.tz {
                return Err((
                    tz.span(),
                    format!("schedule `{name}`: `tz` applies to `cron` only, not to `every`"),
                ));
            }
            Timing::Every(parse_every(name, every)?)
        }
        _ => {
            return Err((
                whole,
                format!("schedule `{name}` must have exactly one of `cron` and `every`"),
            ));
        }
    };
    Ok(timing)
}

fn parse_cron(name: &str, cron: &Spanned<String>) -> Result<croner::Cron, Invalid> {
    let text = cron.get_ref();
    rules::cron(text).map_err(|reason| {
        (
            cron.span(),
            format!(
                "cron `{}` of schedule `{name}`: {reason}; it must be five fields (minute hour \
                 day-of-month month day-of-week) or six (seconds first)",
                text::bounded(text, NAME_MAX)
            ),
        )
    })
}

fn parse_every(name: &str, every: &Spanned<String>) -> Result<std::time::Duration, Invalid> {
    rules::every(every.get_ref()).map_err(|reason| {
        (
            every.span(),
            format!(
                "every `{}` of schedule `{name}`: {reason}",
                text::bounded(every.get_ref(), NAME_MAX)
            ),
        )
    })
}

fn parse_payload(name: &str, payload: &Spanned<toml::Value>) -> Result<serde_json::Value, Invalid> {
    let json = serde_json::to_value(payload.get_ref()).map_err(|err| err.to_string());
    json.and_then(rules::payload).map_err(|reason| {
        (
            payload.span(),
            format!("payload of schedule `{name}`: {reason}"),
        )
    })
}

fn parse_missed(name: &str, missed: &Spanned<toml::Value>) -> Result<Missed, Invalid> {
    let catch_up = match missed.get_ref() {
        toml::Value::String(word) if word == "skip" => return Ok(Missed::Skip),
        toml::Value::Table(table) if table.len() == 1 => table
            .get("catch_up")
            .and_then(toml::Value::as_integer)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (1..=CATCH_UP_MAX).contains(n)),
        _ => None,
    };
    catch_up.map(Missed::CatchUp).ok_or_else(|| {
        (
            missed.span(),
            format!(
                "missed of schedule `{name}`: it must be \"skip\" or {{ catch_up = N }} with N \
                 from 1 to {CATCH_UP_MAX}"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use chrono::{DateTime, Utc};
    use chrono_tz::Tz;

    use super::*;
    use crate::grants::Grants;
    use crate::job::schedule::PAYLOAD_MAX;

    fn parse_text(text: &str) -> Result<Grants, String> {
        Grants::parse(Path::new("jobhost.toml"), text).map_err(|err| err.to_string())
    }

    fn timing(section: &str) -> Timing {
        let grants =
            parse_text(&format!("[schedules.s]\njob_type = \"t\"\n{section}\n")).expect("valid");
        let (_, schedule) = grants.schedules().next().expect("one schedule");
        schedule.timing.clone()
    }

    fn ms(utc: &str) -> i64 {
        DateTime::parse_from_rfc3339(utc)
            .expect("an RFC 3339 time")
            .timestamp_millis()
    }

    fn utc(ms: i64) -> String {
        DateTime::<Utc>::from_timestamp_millis(ms)
            .expect("in range")
            .to_rfc3339()
    }

    /// The ticks of `timing` from `from` to `until`, in UTC.
    fn ticks(timing: &Timing, from: &str, until: &str) -> Vec<String> {
        timing
            .ticks_between(ms(from), ms(until), 1000)
            .1
            .into_iter()
            .map(utc)
            .collect()
    }

    #[test]
    fn a_section_gets_the_documented_defaults() {
        let grants = parse_text("[schedules.\"nightly-report\"]\njob_type = \"reports.Nightly\"\ncron = \"0 3 * * *\"\n")
            .expect("valid");
        let (name, schedule) = grants.schedules().next().expect("one schedule");
        assert_eq!(name, "nightly-report");
        assert_eq!(schedule.job_type, "reports.Nightly");
        assert_eq!(schedule.payload, serde_json::json!({}));
        assert_eq!(schedule.missed, Missed::Skip);
        assert!(schedule.enabled);
        assert!(matches!(schedule.timing, Timing::Cron { tz: Tz::UTC, .. }));
    }

    #[test]
    fn every_field_of_a_section_is_read() {
        let grants = parse_text(
            "[schedules.a]\njob_type = \"t\"\nevery = \"30s\"\npayload = { kind = \"daily\", n = [1, 2] }\n\
             missed = { catch_up = 3 }\nenabled = false\n",
        )
        .expect("valid");
        let (_, a) = grants.schedules().next().expect("one schedule");
        assert!(matches!(a.timing, Timing::Every(d) if d == Duration::from_secs(30)));
        assert_eq!(a.payload, serde_json::json!({"kind": "daily", "n": [1, 2]}));
        assert_eq!(a.missed, Missed::CatchUp(3));
        assert!(!a.enabled);
    }

    #[test]
    fn a_bad_section_is_refused_with_its_line_and_what_to_write() {
        let cases = [
            (
                "[schedules.\"a b\"]\njob_type = \"t\"\nevery = \"1s\"\n",
                "line 1: schedule name `a b`: it must be 1 to 100 ASCII",
            ),
            (
                "[schedules.a]\njob_type = \"\"\nevery = \"1s\"\n",
                "line 2: job_type `` of schedule `a`: it is empty",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\n",
                "must have exactly one of `cron` and `every`",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\ncron = \"* * * * *\"\n",
                "exactly one of `cron` and `every`",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"500ms\"\n",
                "line 3: every `500ms` of schedule `a`: it must be at least 1s",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\ncron = \"61 * * * *\"\n",
                "line 3: cron `61 * * * *` of schedule `a`",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\ncron = \"* * *\"\n",
                "3 fields; it must be five fields",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\ncron = \"0 3 * * *\"\ntz = \"Mars/Olympus\"\n",
                "line 4: tz `Mars/Olympus` of schedule `a`: not an IANA time zone",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\ntz = \"UTC\"\n",
                "`tz` applies to `cron` only",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\nmissed = \"all\"\n",
                "line 4: missed of schedule `a`: it must be \"skip\" or { catch_up = N }",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\nmissed = { catch_up = 0 }\n",
                "with N from 1 to 1000",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\nmissed = { catch_up = 1001 }\n",
                "with N from 1 to 1000",
            ),
            (
                "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\nat = \"3am\"\n",
                "line 4: unknown field `at`",
            ),
        ];
        for (text, expected) in cases {
            let err = parse_text(text).expect_err(text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let big = "x".repeat(PAYLOAD_MAX);
        let err = parse_text(&format!(
            "[schedules.a]\njob_type = \"t\"\nevery = \"1s\"\npayload = {{ k = \"{big}\" }}\n"
        ))
        .expect_err("too large");
        assert!(
            err.contains(
                "line 4: payload of schedule `a`: 65544 bytes of JSON; it may have at most 65536"
            ),
            "{err}"
        );
    }

    #[test]
    fn every_ticks_at_the_multiples_of_its_period_since_the_epoch() {
        let every = timing("every = \"30s\"");
        assert_eq!(every.next_after(0), Some(30_000));
        assert_eq!(every.next_after(29_999), Some(30_000));
        assert_eq!(every.next_after(30_000), Some(60_000));
        assert_eq!(every.ticks_between(0, 95_000, 2), (3, vec![60_000, 90_000]));
        assert_eq!(every.ticks_between(95_000, 95_000, 2), (0, vec![]));
    }

    #[test]
    fn a_fixed_time_in_the_spring_forward_gap_fires_once_right_after_the_gap() {
        // Europe/Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist.
        let daily = timing("cron = \"30 2 * * *\"\ntz = \"Europe/Paris\"");
        assert_eq!(
            ticks(&daily, "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z"),
            [
                "2026-03-28T01:30:00+00:00", // 02:30 CET
                "2026-03-29T01:00:00+00:00", // 03:00 CEST, the first instant after the gap
                "2026-03-30T00:30:00+00:00", // 02:30 CEST
                "2026-03-31T00:30:00+00:00",
            ]
        );
        let half_hourly = timing("cron = \"*/30 * * * *\"\ntz = \"Europe/Paris\"");
        assert_eq!(
            ticks(&half_hourly, "2026-03-29T00:15:00Z", "2026-03-29T01:45:00Z"),
            [
                "2026-03-29T00:30:00+00:00", // 01:30 CET
                "2026-03-29T01:00:00+00:00", // 03:00 CEST: 02:00 and 02:30 never were
                "2026-03-29T01:30:00+00:00", // 03:30 CEST
            ]
        );
    }

    #[test]
    fn a_fixed_time_in_the_fall_back_hour_fires_once_on_its_first_occurrence() {
        // Europe/Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:30 happens twice.
        let daily = timing("cron = \"30 2 * * *\"\ntz = \"Europe/Paris\"");
        assert_eq!(
            ticks(&daily, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
            [
                "2026-10-25T00:30:00+00:00", // 02:30 CEST, the first; not 01:30 UTC (02:30 CET)
                "2026-10-26T01:30:00+00:00", // 02:30 CET
            ]
        );
        let half_hourly = timing("cron = \"*/30 * * * *\"\ntz = \"Europe/Paris\"");
        assert_eq!(
            ticks(&half_hourly, "2026-10-24T23:45:00Z", "2026-10-25T01:45:00Z"),
            [
                "2026-10-25T00:00:00+00:00", // 02:00 CEST
                "2026-10-25T00:30:00+00:00", // 02:30 CEST
                "2026-10-25T01:00:00+00:00", // 02:00 CET: a wildcard matches each wall time
                "2026-10-25T01:30:00+00:00", // 02:30 CET
            ]
        );
    }
}
