//! The fleet-wide limits of `#[queue(...)]` (`concurrency`, `rate`, `burst`) and of
//! `#[job(...)]` (`concurrency(key, limit)`, `rate(key, limit, burst, respect_retry_after)`),
//! checked by the
//! SDK's own rules (`sdk/src/limits.rs`, compiled in), and their expansions.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::quote;
use syn::Meta;

use crate::attrs::{self, Args};
use crate::duration::MAX_DELAY;
use crate::emit;
use crate::errors::Errors;
use crate::limits_rules::{Rate, RateUnit, check_concurrency, check_key};

/// A queue's limits as written.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct QueueLimits {
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<Rate>,
}

/// A job type's per-key limits as written.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct JobLimits {
    pub(crate) concurrency: Option<(String, u32)>,
    pub(crate) rate: Option<KeyRate>,
    pub(crate) unique: Option<(String, Duration)>,
}

/// A job type's rate limit per key (or, without one, of the job type) as written.
#[derive(Debug, PartialEq)]
pub(crate) struct KeyRate {
    pub(crate) key: Option<String>,
    pub(crate) rate: Rate,
    /// `respect_retry_after`, written alone or as `= true`.
    pub(crate) respect_retry_after: bool,
}

/// `concurrency = N`, `rate = "COUNT/UNIT"` and `burst = N` of a `#[queue(...)]`.
pub(crate) fn queue(args: &Args, errors: &mut Errors) -> Option<QueueLimits> {
    let concurrency = args.read_or("concurrency", None, errors, |meta, errors| {
        concurrency(meta, "`concurrency`", errors).map(Some)
    });
    let rate = match (args.get("rate"), args.get("burst")) {
        (Some(rate), burst) => rate_of(rate, burst, "`rate`", errors).map(Some),
        (None, Some(burst)) => {
            errors.spanned(
                burst,
                "`burst` without a `rate`: write `rate = \"10/s\"` too",
            );
            None
        }
        (None, None) => Some(None),
    };
    Some(QueueLimits {
        concurrency: concurrency?,
        rate: rate?,
    })
}

/// `concurrency(key = "..", limit = N)` and `rate(key = "..", limit = "..", burst = N,
/// respect_retry_after)` (`key` optional: without it, the job type as a whole) of a
/// `#[job(...)]`.
pub(crate) fn job(args: &Args, errors: &mut Errors) -> Option<JobLimits> {
    let concurrency = args.read_or("concurrency", None, errors, |meta, errors| {
        let list = attrs::nested(meta, errors)?;
        let inner = Args::from_list(list, &["key", "limit"], errors);
        let key = key(&inner, meta, "concurrency", errors);
        let limit = required(&inner, meta, "concurrency", "limit", errors)
            .and_then(|limit| concurrency(limit, "`concurrency(limit)`", errors));
        Some(Some((key?, limit?)))
    });
    let rate = args.read_or("rate", None, errors, |meta, errors| {
        let list = attrs::nested(meta, errors)?;
        let accepted = &["key", "limit", "burst", "respect_retry_after"];
        let inner = Args::from_list(list, accepted, errors);
        let key = match inner.get("key") {
            None => Some(None),
            Some(_) => key(&inner, meta, "rate", errors).map(Some),
        };
        let rate = required(&inner, meta, "rate", "limit", errors)
            .and_then(|limit| rate_of(limit, inner.get("burst"), "`rate(limit)`", errors));
        let respect_retry_after = match inner.get("respect_retry_after") {
            None => Some(false),
            Some(Meta::Path(_)) => Some(true),
            Some(written) => attrs::boolean(written, errors),
        };
        Some(Some(KeyRate {
            key: key?,
            rate: rate?,
            respect_retry_after: respect_retry_after?,
        }))
    });
    let unique = args.read_or("unique", None, errors, |meta, errors| {
        let list = attrs::nested(meta, errors)?;
        let inner = Args::from_name_values(list, &["key", "for"], errors);
        let key = key(&inner, meta, "unique", errors);
        let for_ = required(&inner, meta, "unique", "for", errors)
            .and_then(|for_| unique_for(for_, errors));
        Some(Some((key?, for_?)))
    });
    Some(JobLimits {
        concurrency: concurrency?,
        rate: rate?,
        unique: unique?,
    })
}

/// How long a unique job holds its key: a duration up to the longest hold.
fn unique_for(meta: &Meta, errors: &mut Errors) -> Option<Duration> {
    let for_ = attrs::duration(meta, errors)?;
    if for_ > MAX_DELAY {
        errors.spanned(
            meta,
            format!("`unique(for)` of {for_:?} is longer than a job can be held, {MAX_DELAY:?}"),
        );
        return None;
    }
    Some(for_)
}

fn concurrency(meta: &Meta, what: &str, errors: &mut Errors) -> Option<u32> {
    let limit = attrs::int::<i64>(meta, i64::MIN..=i64::MAX, "a whole number", errors)?;
    check_concurrency(limit)
        .map_err(|why| errors.spanned(meta, format!("{what} {why}")))
        .ok()
}

fn rate_of(rate: &Meta, burst: Option<&Meta>, what: &str, errors: &mut Errors) -> Option<Rate> {
    let text = attrs::string(rate, errors)?.value();
    let parsed = Rate::parse(&text)
        .map_err(|why| errors.spanned(rate, format!("{what} \"{text}\": {why}")))
        .ok()?;
    let Some(burst) = burst else {
        return Some(parsed);
    };
    let n = attrs::int::<i64>(burst, i64::MIN..=i64::MAX, "a whole number", errors)?;
    parsed
        .with_burst(n)
        .map_err(|why| errors.spanned(burst, format!("`burst` {why}")))
        .ok()
}

fn key(inner: &Args, meta: &Meta, what: &str, errors: &mut Errors) -> Option<String> {
    let written = required(inner, meta, what, "key", errors)?;
    let key = attrs::string(written, errors)?.value();
    check_key(&key)
        .map_err(|why| errors.spanned(written, format!("`{what}(key)` \"{key}\": {why}")))
        .ok()?;
    Some(key)
}

fn required<'a>(
    inner: &'a Args,
    meta: &Meta,
    what: &str,
    key: &str,
    errors: &mut Errors,
) -> Option<&'a Meta> {
    let found = inner.get(key);
    if found.is_none() {
        errors.spanned(meta, format!("`{what}(...)` needs `{key} = ...`"));
    }
    found
}

/// A `jobhost_sdk::limits::QueueLimits` expression.
pub(crate) fn emit_queue(limits: &QueueLimits) -> TokenStream {
    let concurrency = option(limits.concurrency.map(|n| quote!(#n)));
    let rate = option(limits.rate.as_ref().map(emit_rate));
    quote!(::jobhost_sdk::limits::QueueLimits { concurrency: #concurrency, rate: #rate })
}

/// A `jobhost_sdk::limits::JobLimits` expression.
pub(crate) fn emit_job(limits: &JobLimits) -> TokenStream {
    let concurrency = option(limits.concurrency.as_ref().map(|(key, limit)| {
        quote!(::jobhost_sdk::limits::KeyCap {
            key: ::std::string::String::from(#key),
            limit: #limit,
        })
    }));
    let rate = option(limits.rate.as_ref().map(|limit| {
        let key = option(
            limit
                .key
                .as_ref()
                .map(|key| quote!(::std::string::String::from(#key))),
        );
        let respect_retry_after = limit.respect_retry_after;
        let rate = emit_rate(&limit.rate);
        quote!(::jobhost_sdk::limits::KeyRate {
            key: #key,
            rate: #rate,
            respect_retry_after: #respect_retry_after,
        })
    }));
    let unique = option(limits.unique.as_ref().map(|(key, for_)| {
        let for_ = emit::duration(*for_);
        quote!(::jobhost_sdk::limits::UniqueKey {
            key: ::std::string::String::from(#key),
            for_: #for_,
        })
    }));
    quote!(::jobhost_sdk::limits::JobLimits {
        concurrency: #concurrency,
        rate: #rate,
        unique: #unique,
    })
}

fn emit_rate(rate: &Rate) -> TokenStream {
    let (count, burst) = (rate.count, rate.burst);
    let unit = match rate.unit {
        RateUnit::Second => quote!(Second),
        RateUnit::Minute => quote!(Minute),
        RateUnit::Hour => quote!(Hour),
    };
    quote!(::jobhost_sdk::limits::Rate {
        count: #count,
        unit: ::jobhost_sdk::limits::RateUnit::#unit,
        burst: #burst,
    })
}

fn option(value: Option<TokenStream>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

#[cfg(test)]
mod tests {
    use syn::{Attribute, parse_quote};

    use super::*;

    fn queue_of(attr: Attribute) -> Result<QueueLimits, Vec<String>> {
        let mut errors = Errors::default();
        let keys = &["concurrency", "rate", "burst"];
        let args = Args::from_attrs(&[attr], "queue", keys, &mut errors);
        let limits = queue(&args, &mut errors);
        errors
            .finish(limits)
            .map_err(|error| error.into_iter().map(|e| e.to_string()).collect())
    }

    fn job_of(attr: Attribute) -> Result<JobLimits, Vec<String>> {
        let mut errors = Errors::default();
        let keys = &["concurrency", "rate", "unique"];
        let args = Args::from_attrs(&[attr], "job", keys, &mut errors);
        let limits = job(&args, &mut errors);
        errors
            .finish(limits)
            .map_err(|error| error.into_iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn a_queue_declares_a_cap_and_a_rate_with_its_burst() {
        let limits = queue_of(parse_quote!(#[queue(concurrency = 4, rate = "50/s", burst = 20)]))
            .expect("valid");
        assert_eq!(limits.concurrency, Some(4));
        let rate = limits.rate.expect("a rate");
        assert_eq!(
            (rate.count, rate.unit, rate.burst),
            (50, RateUnit::Second, 20)
        );
        assert_eq!(
            queue_of(parse_quote!(#[queue()])),
            Ok(QueueLimits::default())
        );
    }

    #[test]
    fn a_job_declares_a_cap_and_a_rate_per_key() {
        let limits = job_of(parse_quote!(#[job(
            concurrency(key = "customer_id", limit = 2),
            rate(key = "customer_id", limit = "10/m")
        )]))
        .expect("valid");
        assert_eq!(limits.concurrency, Some(("customer_id".to_owned(), 2)));
        let limit = limits.rate.expect("a rate");
        assert_eq!(
            (
                limit.key.as_deref(),
                limit.rate.count,
                limit.rate.burst,
                limit.respect_retry_after
            ),
            (Some("customer_id"), 10, 10, false)
        );
        for attr in [
            parse_quote!(#[job(rate(key = "k", limit = "1/s", respect_retry_after))]),
            parse_quote!(#[job(rate(key = "k", limit = "1/s", respect_retry_after = true))]),
        ] {
            let limit = job_of(attr).expect("valid").rate.expect("a rate");
            assert!(limit.respect_retry_after, "{limit:?}");
        }
        let whole = job_of(parse_quote!(#[job(rate(limit = "100/m"))]))
            .expect("valid")
            .rate
            .expect("a rate");
        assert_eq!(whole.key, None, "without a key, the job type as a whole");
        let unique = job_of(parse_quote!(#[job(unique(key = "order_id", for = "10m"))]))
            .expect("valid")
            .unique;
        assert_eq!(
            unique,
            Some(("order_id".to_owned(), Duration::from_secs(600)))
        );
    }

    #[test]
    fn out_of_range_limits_and_bad_keys_fail_to_compile_saying_why() {
        for (attr, wanted) in [
            (
                parse_quote!(#[queue(concurrency = 0)]),
                "`concurrency` is 0; it must be 1 to 1000",
            ),
            (
                parse_quote!(#[queue(rate = "10/d")]),
                "the unit must be `s`, `m` or `h`",
            ),
            (
                parse_quote!(#[queue(rate = "2000/s")]),
                "at most 1000 jobs a second",
            ),
            (
                parse_quote!(#[queue(rate = "10/s", burst = 0)]),
                "`burst` is 0",
            ),
            (
                parse_quote!(#[queue(burst = 5)]),
                "`burst` without a `rate`",
            ),
        ] {
            let errors = queue_of(attr).expect_err(wanted);
            assert!(errors.iter().any(|e| e.contains(wanted)), "{errors:?}");
        }
        for (attr, wanted) in [
            (
                parse_quote!(#[job(concurrency(limit = 2))]),
                "needs `key = ...`",
            ),
            (
                parse_quote!(#[job(concurrency(key = "a.b", limit = 2))]),
                "ASCII letters",
            ),
            (parse_quote!(#[job(rate(key = "k"))]), "needs `limit = ...`"),
            (parse_quote!(#[job(unique(key = "k"))]), "needs `for = ...`"),
            (
                parse_quote!(#[job(unique(key = "k", for = "30d"))]),
                "longer than a job can be held",
            ),
            (
                parse_quote!(#[job(rate(key = "k", limit = "1/s", burst = 20000))]),
                "`burst` is 20000",
            ),
            (
                parse_quote!(#[job(rate(key = "k", limit = "1/s", respect_retry_after = 1))]),
                "`respect_retry_after` expects `true` or `false`",
            ),
        ] {
            let errors = job_of(attr).expect_err(wanted);
            assert!(errors.iter().any(|e| e.contains(wanted)), "{errors:?}");
        }
    }
}
