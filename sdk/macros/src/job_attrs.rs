//! `#[job(...)]` on a job struct (syn only).

use std::time::Duration;

use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{DeriveInput, Ident, Meta, Path};

use crate::attrs::{self, Args};
use crate::errors::Errors;
use crate::limits;
use crate::retry::{self, RetrySpec};
use crate::schedule;
use crate::shape::{self, ItemKind};

/// A checked `#[derive(Job)]` struct.
#[derive(Debug)]
pub(crate) struct JobSpec {
    pub(crate) ident: Ident,
    /// `None`: the default, `module_path::TypeName`, which only the expansion can spell.
    pub(crate) name: Option<String>,
    /// `AppQueues` of `queue = AppQueues::Images`.
    pub(crate) queues: Path,
    /// `AppQueues::Images` of `queue = AppQueues::Images`.
    pub(crate) queue: Path,
    /// `None` when the job writes no `retry(...)` and so follows its queue.
    pub(crate) retry: Option<RetrySpec>,
    pub(crate) timeout: Option<Duration>,
    /// Its fleet-wide per-key cap and rate limit.
    pub(crate) limits: limits::JobLimits,
    /// Its periodic schedule, if it declares one.
    pub(crate) schedule: Option<schedule::ScheduleSpec>,
}

const KEYS: &[&str] = &[
    "queue",
    "name",
    "retry",
    "timeout",
    "concurrency",
    "rate",
    "unique",
    "cron",
    "tz",
    "every",
    "payload",
    "catch_up",
];
const QUEUE_EXAMPLE: &str = "AppQueues::Images";

/// Read and check the struct's `#[job(...)]`, reporting every error at once.
pub(crate) fn parse(input: &DeriveInput) -> syn::Result<JobSpec> {
    let mut errors = Errors::default();
    shape::check(
        input,
        "Job",
        ItemKind::Struct,
        "the job's payload",
        &mut errors,
    );
    let args = Args::from_attrs(&input.attrs, "job", KEYS, &mut errors);
    let name = args.read_or("name", None, &mut errors, |meta, errors| {
        attrs::name(meta, errors).map(Some)
    });
    let retry = args.read_or("retry", None, &mut errors, |meta, errors| {
        attrs::nested(meta, errors)
            .and_then(|list| retry::parse(list, errors))
            .map(Some)
    });
    let timeout = args.read_or("timeout", None, &mut errors, |meta, errors| {
        attrs::duration(meta, errors).map(Some)
    });
    let queue = match args.get("queue") {
        Some(meta) => queue_path(meta, &mut errors),
        None => {
            let attr = input.attrs.iter().find(|attr| attr.path().is_ident("job"));
            let message = format!(
                "missing `queue = ...` in `#[job(...)]`: every job names the queue it is \
                 published to, e.g. `#[job(queue = {QUEUE_EXAMPLE})]`"
            );
            match attr {
                Some(attr) => errors.spanned(attr, message),
                None => errors.at(input.ident.span(), message),
            }
            None
        }
    };
    let limits = limits::job(&args, &mut errors);
    let schedule = schedule::parse(&args, &mut errors);
    let spec = match (name, retry, timeout, queue, limits, schedule) {
        (
            Some(name),
            Some(retry),
            Some(timeout),
            Some((queues, queue)),
            Some(limits),
            Some(schedule),
        ) => Some(JobSpec {
            ident: input.ident.clone(),
            name,
            queues,
            queue,
            retry,
            timeout,
            limits,
            schedule,
        }),
        _ => None,
    };
    errors.finish(spec)
}

/// `Type::Variant` split into the queue set's type and the whole path.
fn queue_path(meta: &Meta, errors: &mut Errors) -> Option<(Path, Path)> {
    let path = attrs::path(meta, QUEUE_EXAMPLE, errors)?;
    if path.segments.len() < 2 {
        errors.spanned(
            meta,
            format!(
                "`queue` must name a variant of a `#[derive(Queues)]` enum as `Type::Variant`, \
                 got `{}`: write e.g. `queue = {QUEUE_EXAMPLE}`",
                path.to_token_stream()
            ),
        );
        return None;
    }
    let segments = path.segments.iter().take(path.segments.len() - 1).cloned();
    let queues = Path {
        leading_colon: path.leading_colon,
        segments: segments.collect::<Punctuated<_, _>>(),
    };
    Some((queues, path.clone()))
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn errors_of(input: DeriveInput) -> Vec<String> {
        let error = parse(&input).expect_err("the struct has mistakes");
        error.into_iter().map(|error| error.to_string()).collect()
    }

    #[test]
    fn the_queue_path_splits_into_the_set_and_the_variant() {
        let spec = parse(&parse_quote! {
            #[job(queue = crate::queues::AppQueues::Images)]
            struct ResizeImage { path: String }
        })
        .expect("a valid job");
        assert_eq!(
            spec.queues.to_token_stream().to_string(),
            "crate :: queues :: AppQueues"
        );
        assert_eq!(
            spec.queue.to_token_stream().to_string(),
            "crate :: queues :: AppQueues :: Images"
        );
        assert_eq!(
            (spec.name, spec.retry, spec.timeout),
            (None, None, None),
            "all defaults"
        );
    }

    #[test]
    fn name_retry_and_timeout_are_read() {
        let spec = parse(&parse_quote! {
            #[job(queue = Q::A, name = "resize", retry(max_attempts = 5), timeout = "2 m")]
            struct ResizeImage;
        })
        .expect("a valid job");
        assert_eq!(spec.name.as_deref(), Some("resize"));
        assert_eq!(spec.retry.map(|retry| retry.max_attempts), Some(5));
        assert_eq!(spec.timeout, Some(Duration::from_secs(120)));
    }

    #[test]
    fn a_missing_or_one_segment_queue_is_refused() {
        let missing = errors_of(parse_quote!(
            #[job(name = "x")]
            struct J;
        ));
        assert!(
            missing[0].starts_with("missing `queue = ...`"),
            "{missing:?}"
        );
        let no_attribute = errors_of(parse_quote!(
            struct J;
        ));
        assert!(
            no_attribute[0].starts_with("missing `queue = ...`"),
            "{no_attribute:?}"
        );
        let short = errors_of(parse_quote!(
            #[job(queue = Images)]
            struct J;
        ));
        assert!(
            short[0].starts_with("`queue` must name a variant"),
            "{short:?}"
        );
        let not_a_path = errors_of(parse_quote!(
            #[job(queue = "Q::A")]
            struct J;
        ));
        assert!(
            not_a_path[0].starts_with("`queue` expects a path"),
            "{not_a_path:?}"
        );
    }

    #[test]
    fn every_mistake_is_reported_together() {
        let errors = errors_of(parse_quote! {
            #[job(retry(max_attempts = 0), timeout = "1.5s", nmae = "x")]
            enum J<T> { A(T) }
        });
        assert_eq!(errors.len(), 6, "{errors:#?}");
    }
}
