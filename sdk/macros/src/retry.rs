//! `retry(...)`: reading and checking a retry policy, the grammar of
//! docs/plugin-authors.md, "Retries and backoff" (syn only).

use std::time::Duration;

use syn::{Meta, MetaList};

use crate::attrs::{self, Args};
use crate::duration::MAX_DELAY;
use crate::errors::Errors;

/// A checked `retry(...)`, mirroring `jobhost_sdk::RetryPolicy`; this crate cannot name the
/// SDK's types because the SDK depends on it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RetrySpec {
    pub(crate) max_attempts: u32,
    pub(crate) backoff: BackoffSpec,
}

/// Mirrors `jobhost_sdk::Backoff`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BackoffSpec {
    None,
    Fixed(Duration),
    Exponential {
        base: Duration,
        factor: f64,
        max: Duration,
        jitter: bool,
    },
}

const KEYS: &[&str] = &[
    "max_attempts",
    "backoff",
    "delay",
    "base",
    "factor",
    "max",
    "jitter",
];
const DEFAULT_ATTEMPTS: u32 = 3;
// The same numbers as `jobhost_sdk::Backoff::exponential()`.
const DEFAULT_BASE: Duration = Duration::from_secs(1);
const DEFAULT_FACTOR: f64 = 2.0;
const DEFAULT_MAX: Duration = Duration::from_secs(300);
const DEFAULT_JITTER: bool = true;

/// The value of `backoff = "..."`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    None,
    Fixed,
    Exponential,
}

impl Kind {
    const ALL: [Self; 3] = [Self::None, Self::Fixed, Self::Exponential];

    fn word(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Fixed => "fixed",
            Self::Exponential => "exponential",
        }
    }

    /// The kind a key belongs to; `None` for keys every kind takes.
    fn owning(key: &str) -> Option<Self> {
        match key {
            "delay" => Some(Self::Fixed),
            "base" | "factor" | "max" | "jitter" => Some(Self::Exponential),
            _ => None,
        }
    }
}

/// Read `retry(...)`. `None` once an error is recorded; reading goes on, so every other
/// mistake in the list is recorded too (except, after a misspelt `backoff`, keys that
/// belong to one kind: there is no kind to check them against).
pub(crate) fn parse(list: &MetaList, errors: &mut Errors) -> Option<RetrySpec> {
    let args = Args::from_list(list, KEYS, errors);
    let max_attempts = args.read_or("max_attempts", DEFAULT_ATTEMPTS, errors, |meta, errors| {
        attrs::int(
            meta,
            1..=u32::MAX,
            "at least 1 (1 means no retries)",
            errors,
        )
    });
    let backoff_meta = args.get("backoff");
    // A misspelt kind leaves nothing to check the other keys against.
    let kind = args.read_or("backoff", Kind::Exponential, errors, read_kind)?;
    let foreign = foreign_keys(&args, kind, backoff_meta.is_none(), errors);
    let backoff = match kind {
        Kind::None => Some(BackoffSpec::None),
        Kind::Fixed => fixed(&args, backoff_meta, errors),
        Kind::Exponential => exponential(&args, errors),
    };
    if foreign {
        return None;
    }
    Some(RetrySpec {
        max_attempts: max_attempts?,
        backoff: backoff?,
    })
}

fn read_kind(meta: &Meta, errors: &mut Errors) -> Option<Kind> {
    let written = attrs::string(meta, errors)?.value();
    let kind = Kind::ALL.into_iter().find(|kind| kind.word() == written);
    if kind.is_none() {
        errors.spanned(
            meta,
            format!("`backoff` must be \"none\", \"fixed\" or \"exponential\", got \"{written}\""),
        );
    }
    kind
}

/// Record every key that belongs to another kind than `kind`; true if there was one.
fn foreign_keys(args: &Args, kind: Kind, kind_is_default: bool, errors: &mut Errors) -> bool {
    let mut found = false;
    for meta in args.iter() {
        let key = attrs::key(meta);
        let Some(owner) = Kind::owning(&key).filter(|owner| *owner != kind) else {
            continue;
        };
        found = true;
        let owner = owner.word();
        let message = match kind {
            Kind::None => format!(
                "`{key}` does not apply to `backoff = \"none\"`, which takes no other keys: \
                 remove `{key}`, or write `backoff = \"{owner}\"`"
            ),
            _ => format!(
                "`{key}` applies only to `backoff = \"{owner}\"`, but this policy is \
                 `backoff = \"{}\"`{}: remove `{key}`, or write `backoff = \"{owner}\"`",
                kind.word(),
                if kind_is_default {
                    " (the default)"
                } else {
                    ""
                },
            ),
        };
        errors.spanned(meta, message);
    }
    found
}

fn fixed(args: &Args, backoff_meta: Option<&Meta>, errors: &mut Errors) -> Option<BackoffSpec> {
    if let Some(meta) = args.get("delay") {
        return hold_delay(meta, errors).map(BackoffSpec::Fixed);
    }
    // Fixed is never the default, so `backoff` was written and is what to point at.
    errors.spanned(
        backoff_meta,
        "`backoff = \"fixed\"` needs `delay`, the wait before every retry: \
         add e.g. `delay = \"30s\"`",
    );
    None
}

fn exponential(args: &Args, errors: &mut Errors) -> Option<BackoffSpec> {
    let base = args.read_or("base", DEFAULT_BASE, errors, hold_delay);
    let max = args.read_or("max", DEFAULT_MAX, errors, hold_delay);
    let factor = args.read_or("factor", DEFAULT_FACTOR, errors, factor);
    let jitter = args.read_or("jitter", DEFAULT_JITTER, errors, attrs::boolean);
    let (base, max) = (base?, max?);
    if base > max {
        let default = |key| {
            if args.get(key).is_some() {
                ""
            } else {
                ", the default"
            }
        };
        let message = format!(
            "`base` ({base:?}{}) exceeds `max` ({max:?}{}): the first wait cannot be longer \
             than the cap; lower `base` or raise `max`",
            default("base"),
            default("max"),
        );
        // The defaults are in order, so at least one side was written: point at it.
        errors.spanned(args.get("base").or_else(|| args.get("max")), message);
        return None;
    }
    Some(BackoffSpec::Exponential {
        base,
        factor: factor?,
        max,
        jitter: jitter?,
    })
}

/// A wait between attempts: a duration no longer than [`MAX_DELAY`], because the job
/// waits in a broker hold queue, which cannot hold it longer (the host would refuse the
/// plugin at load).
fn hold_delay(meta: &Meta, errors: &mut Errors) -> Option<Duration> {
    let delay = attrs::duration(meta, errors)?;
    if delay > MAX_DELAY {
        errors.spanned(
            meta,
            format!(
                "`{}` of {delay:?} exceeds the longest hold of {MAX_DELAY:?} (about 24.8 days, \
                 `jobhost_sdk::MAX_DELAY`): a retry waits in a broker hold queue, which \
                 cannot hold a job longer",
                attrs::key(meta)
            ),
        );
        return None;
    }
    Some(delay)
}

fn factor(meta: &Meta, errors: &mut Errors) -> Option<f64> {
    let factor = attrs::number(meta, errors)?;
    if factor.is_finite() && factor > 0.0 {
        return Some(factor);
    }
    errors.spanned(
        meta,
        format!(
            "`factor` must be finite and greater than 0, got `{factor}`: write e.g. `factor = 2.0`"
        ),
    );
    None
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn read(list: MetaList) -> Result<RetrySpec, Vec<String>> {
        let mut errors = Errors::default();
        let spec = parse(&list, &mut errors);
        errors
            .finish(spec)
            .map_err(|error| error.into_iter().map(|e| e.to_string()).collect())
    }

    fn exponential(base: u64, factor: f64, max: u64, jitter: bool) -> BackoffSpec {
        BackoffSpec::Exponential {
            base: Duration::from_secs(base),
            factor,
            max: Duration::from_secs(max),
            jitter,
        }
    }

    #[test]
    fn an_empty_retry_means_every_default() {
        let spec = read(parse_quote!(retry())).expect("retry() is valid");
        assert_eq!(
            spec,
            RetrySpec {
                max_attempts: 3,
                backoff: exponential(1, 2.0, 300, true)
            }
        );
    }

    #[test]
    fn every_exponential_key_is_read() {
        let spec = read(parse_quote!(retry(
            max_attempts = 7,
            backoff = "exponential",
            base = "2s",
            factor = 3,
            max = "2m",
            jitter = false
        )));
        let expected = RetrySpec {
            max_attempts: 7,
            backoff: exponential(2, 3.0, 120, false),
        };
        assert_eq!(spec, Ok(expected), "an integer factor is a factor too");
    }

    #[test]
    fn fixed_and_none_take_their_own_keys() {
        let fixed = read(parse_quote!(retry(backoff = "fixed", delay = "500ms")));
        let expected = BackoffSpec::Fixed(Duration::from_millis(500));
        assert_eq!(
            fixed,
            Ok(RetrySpec {
                max_attempts: 3,
                backoff: expected
            })
        );
        let none = read(parse_quote!(retry(max_attempts = 2, backoff = "none")));
        assert_eq!(
            none,
            Ok(RetrySpec {
                max_attempts: 2,
                backoff: BackoffSpec::None
            })
        );
    }

    #[test]
    fn keys_of_another_backoff_kind_are_refused_naming_both_kinds() {
        assert_eq!(
            read(parse_quote!(retry(
                delay = "1s",
                backoff = "none",
                jitter = true
            ))),
            Err(vec![
                "`delay` does not apply to `backoff = \"none\"`, which takes no other keys: \
                 remove `delay`, or write `backoff = \"fixed\"`"
                    .to_owned(),
                "`jitter` does not apply to `backoff = \"none\"`, which takes no other keys: \
                 remove `jitter`, or write `backoff = \"exponential\"`"
                    .to_owned(),
            ])
        );
        assert_eq!(
            read(parse_quote!(retry(delay = "1s"))),
            Err(vec![
                "`delay` applies only to `backoff = \"fixed\"`, but this policy is \
                 `backoff = \"exponential\"` (the default): remove `delay`, or write \
                 `backoff = \"fixed\"`"
                    .to_owned()
            ])
        );
        let base_with_fixed = read(parse_quote!(retry(
            backoff = "fixed",
            delay = "1s",
            base = "1s"
        )));
        assert!(
            base_with_fixed.is_err(),
            "`base` belongs to exponential backoff"
        );
    }

    #[test]
    fn fixed_needs_a_delay() {
        let errors = read(parse_quote!(retry(backoff = "fixed"))).expect_err("no delay");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("`backoff = \"fixed\"` needs `delay`"),
            "{errors:?}"
        );
    }

    #[test]
    fn base_above_max_is_refused_also_against_the_defaults() {
        assert_eq!(
            read(parse_quote!(retry(base = "10m"))),
            Err(vec![
                "`base` (600s) exceeds `max` (300s, the default): the first wait cannot be \
                 longer than the cap; lower `base` or raise `max`"
                    .to_owned()
            ])
        );
        assert!(
            read(parse_quote!(retry(max = "500ms"))).is_err(),
            "against the default base"
        );
        assert!(
            read(parse_quote!(retry(base = "2m", max = "2m"))).is_ok(),
            "equal is fine"
        );
    }

    #[test]
    fn waits_longer_than_the_longest_hold_are_refused_naming_the_key_and_the_limit() {
        for (list, key) in [
            (
                parse_quote!(retry(backoff = "fixed", delay = "25d")),
                "delay",
            ),
            (parse_quote!(retry(max = "2147483648ms")), "max"),
            (parse_quote!(retry(base = "30d", max = "30d")), "base"),
        ] {
            let errors = read(list).expect_err("no hold queue holds a job that long");
            assert!(
                errors[0].starts_with(&format!("`{key}` of "))
                    && errors[0].contains("exceeds the longest hold of 2147483.647s"),
                "{errors:?}"
            );
        }
        assert!(
            read(parse_quote!(retry(
                backoff = "fixed",
                delay = "2147483647ms"
            )))
            .is_ok(),
            "the longest hold itself is a valid wait"
        );
    }

    #[test]
    fn factor_must_be_finite_and_positive() {
        for list in [
            parse_quote!(retry(factor = 0)),
            parse_quote!(retry(factor = -2.0)),
            parse_quote!(retry(factor = 1e999)),
        ] {
            let errors = read(list).expect_err("a factor that does not grow the wait");
            assert!(
                errors[0].starts_with("`factor` must be finite and greater than 0"),
                "{errors:?}"
            );
        }
        assert!(
            read(parse_quote!(retry(factor = 0.5))).is_ok(),
            "a shrinking factor is allowed"
        );
    }

    #[test]
    fn every_mistake_in_one_list_is_reported() {
        let errors = read(parse_quote!(retry(
            max_attempts = 0,
            base = "0s",
            factor = -1,
            jitter = "yes",
            colour = "red"
        )))
        .expect_err("five mistakes");
        assert_eq!(errors.len(), 5, "{errors:?}");
    }

    #[test]
    fn an_unknown_backoff_kind_lists_the_kinds() {
        assert_eq!(
            read(parse_quote!(retry(backoff = "linear"))),
            Err(vec![
                "`backoff` must be \"none\", \"fixed\" or \"exponential\", got \"linear\""
                    .to_owned()
            ])
        );
    }
}
