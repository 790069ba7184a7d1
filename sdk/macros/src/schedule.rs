//! The periodic schedule of `#[job(...)]` (`cron` with `tz`, or `every`; `payload`,
//! `catch_up`), checked by the SDK's own rules (`sdk/src/schedule.rs`, compiled in) as far
//! as a derive can: the cron expression, the time zone and the payload's JSON are checked
//! by the host when it loads the plugin.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::quote;

use crate::attrs::{self, Args};
use crate::emit;
use crate::errors::Errors;
use crate::schedule_rules::{CATCH_UP_MAX, EVERY_MIN};

/// A job type's schedule as written.
#[derive(Debug, PartialEq)]
pub(crate) struct ScheduleSpec {
    pub(crate) timing: TimingSpec,
    pub(crate) payload: String,
    pub(crate) catch_up: u32,
}

/// When it fires, as written.
#[derive(Debug, PartialEq)]
pub(crate) enum TimingSpec {
    Cron { expression: String, tz: String },
    Every(Duration),
}

/// The schedule of a `#[job(...)]`: `Some(None)` when it declares none, `None` when what it
/// declares is wrong (the errors say why).
pub(crate) fn parse(args: &Args, errors: &mut Errors) -> Option<Option<ScheduleSpec>> {
    let (cron, every, tz) = (args.get("cron"), args.get("every"), args.get("tz"));
    let timing = match (cron, every) {
        (None, None) => {
            let mut alone = false;
            for lone in ["tz", "payload", "catch_up"] {
                if let Some(meta) = args.get(lone) {
                    alone = true;
                    errors.spanned(
                        meta,
                        format!(
                            "`{lone}` without a schedule: write `cron = \"..\"` or \
                             `every = \"..\"` too"
                        ),
                    );
                }
            }
            return (!alone).then_some(None);
        }
        (Some(cron), None) => {
            let expression = attrs::string(cron, errors)?.value();
            let fields = expression.split_whitespace().count();
            if !(5..=6).contains(&fields) {
                errors.spanned(
                    cron,
                    format!(
                        "`cron` \"{expression}\" has {fields} fields: write five (minute hour \
                         day-of-month month day-of-week) or six (seconds first)"
                    ),
                );
                return None;
            }
            let tz = match tz {
                Some(tz) => attrs::string(tz, errors)?.value(),
                None => String::new(),
            };
            TimingSpec::Cron { expression, tz }
        }
        (None, Some(every)) => {
            if let Some(tz) = tz {
                errors.spanned(tz, "`tz` applies to `cron` only, not to `every`");
                return None;
            }
            let period = attrs::duration(every, errors)?;
            if period < EVERY_MIN {
                errors.spanned(every, format!("`every` must be at least {EVERY_MIN:?}"));
                return None;
            }
            TimingSpec::Every(period)
        }
        (Some(_), Some(every)) => {
            errors.spanned(every, "write one of `cron` and `every`, not both");
            return None;
        }
    };
    let payload = match args.get("payload") {
        Some(payload) => attrs::string(payload, errors)?.value(),
        None => "{}".to_owned(),
    };
    let catch_up = match args.get("catch_up") {
        Some(meta) => attrs::int::<u32>(
            meta,
            0..=CATCH_UP_MAX,
            &format!("between 0 and {CATCH_UP_MAX}"),
            errors,
        )?,
        None => 0,
    };
    Some(Some(ScheduleSpec {
        timing,
        payload,
        catch_up,
    }))
}

/// An `Option<jobhost_sdk::schedule::Schedule>` expression.
pub(crate) fn emit(schedule: Option<&ScheduleSpec>) -> TokenStream {
    let Some(schedule) = schedule else {
        return quote!(::core::option::Option::None);
    };
    let timing = match &schedule.timing {
        TimingSpec::Cron { expression, tz } => quote!(::jobhost_sdk::schedule::Timing::Cron {
            expression: ::std::string::String::from(#expression),
            tz: ::std::string::String::from(#tz),
        }),
        TimingSpec::Every(period) => {
            let period = emit::duration(*period);
            quote!(::jobhost_sdk::schedule::Timing::Every(#period))
        }
    };
    let (payload, catch_up) = (&schedule.payload, schedule.catch_up);
    quote!(::core::option::Option::Some(::jobhost_sdk::schedule::Schedule {
        timing: #timing,
        payload: ::std::string::String::from(#payload),
        catch_up: #catch_up,
    }))
}

#[cfg(test)]
mod tests {
    use syn::{Attribute, parse_quote};

    use super::*;

    fn schedule_of(attr: Attribute) -> Result<Option<ScheduleSpec>, Vec<String>> {
        let mut errors = Errors::default();
        let keys = &["cron", "tz", "every", "payload", "catch_up"];
        let args = Args::from_attrs(&[attr], "job", keys, &mut errors);
        let schedule = parse(&args, &mut errors);
        errors
            .finish(schedule)
            .map_err(|error| error.into_iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn a_job_declares_a_cron_schedule_in_a_time_zone_or_a_period() {
        let cron = schedule_of(parse_quote!(#[job(
            cron = "0 7 * * *", tz = "Europe/Paris", payload = r#"{"kind":"daily"}"#, catch_up = 3
        )]))
        .expect("valid")
        .expect("a schedule");
        assert_eq!(
            cron,
            ScheduleSpec {
                timing: TimingSpec::Cron {
                    expression: "0 7 * * *".to_owned(),
                    tz: "Europe/Paris".to_owned()
                },
                payload: r#"{"kind":"daily"}"#.to_owned(),
                catch_up: 3,
            }
        );
        let every = schedule_of(parse_quote!(#[job(every = "30s")]))
            .expect("valid")
            .expect("a schedule");
        assert_eq!(every.timing, TimingSpec::Every(Duration::from_secs(30)));
        assert_eq!((every.payload.as_str(), every.catch_up), ("{}", 0));
        assert_eq!(
            schedule_of(parse_quote!(#[job()])),
            Ok(None),
            "none declared"
        );
    }

    #[test]
    fn a_schedule_that_cannot_be_fails_to_compile_saying_why() {
        for (attr, wanted) in [
            (
                parse_quote!(#[job(cron = "0 7 * *")]),
                "has 4 fields: write five",
            ),
            (
                parse_quote!(#[job(every = "500ms")]),
                "`every` must be at least 1s",
            ),
            (
                parse_quote!(#[job(every = "1m", tz = "UTC")]),
                "`tz` applies to `cron` only",
            ),
            (
                parse_quote!(#[job(every = "1m", cron = "* * * * *")]),
                "one of `cron` and `every`, not both",
            ),
            (
                parse_quote!(#[job(payload = "{}")]),
                "`payload` without a schedule",
            ),
            (
                parse_quote!(#[job(every = "1m", catch_up = 1001)]),
                "between 0 and 1000",
            ),
        ] {
            let errors = schedule_of(attr).expect_err(wanted);
            assert!(errors.iter().any(|e| e.contains(wanted)), "{errors:?}");
        }
    }
}
