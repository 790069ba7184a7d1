//! The `Queues` and `Job` derives of `jobhost-sdk`; use them through that crate.
//!
//! # Table of contents
//! - [`macro@Queues`], [`macro@Job`]: the derives and their grammar.
//! - `attrs`, `retry`, `queues_attrs`, `job_attrs`, `shape`: reading and checking the
//!   attributes (syn only, unit-tested), every mistake collected by `errors`.
//! - `queues`, `job`, `emit`: the expansions, which name only `::jobhost_sdk` paths.
//! - `duration`: the SDK's own `sdk/src/duration.rs`, compiled in so that attributes and
//!   the host's flags share one duration grammar; `limits_rules`, likewise
//!   `sdk/src/limits.rs`, and `limits`, the caps and rate limits read with those rules;
//!   `schedule_rules` and `schedule`, a job type's periodic schedule, likewise.

#![warn(missing_docs)]

mod attrs;
// The file's items are `pub` for the SDK's API; here they are private to this crate.
#[allow(unreachable_pub)]
#[path = "../../src/duration.rs"]
mod duration;
mod emit;
mod limits;
// The SDK's rules for limits, compiled in like `duration`: one grammar for attributes,
// the host's load checks and the grants file.
mod errors;
mod job;
mod job_attrs;
#[allow(unreachable_pub, dead_code)]
#[path = "../../src/limits.rs"]
mod limits_rules;
mod queues;
mod queues_attrs;
mod retry;
mod schedule;
// The SDK's rules for schedules, compiled in like `limits_rules`.
#[allow(unreachable_pub, dead_code)]
#[path = "../../src/schedule.rs"]
mod schedule_rules;
mod shape;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Implements `jobhost_sdk::Queues` for an enum of unit variants, one per queue.
///
/// ```ignore
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
/// #[queues(prefix = "myapp")]                   // optional
/// enum AppQueues {
///     #[queue(retry(max_attempts = 3, backoff = "exponential", base = "1s", max = "2m"))]
///     Images,                                   // broker name `myapp.images`
///     #[queue(name = "mail", prefetch = 4, timeout = "30s")]
///     Emails,                                   // broker name `mail`
/// }
/// ```
///
/// `#[queue(...)]` keys, all optional:
/// - `name = "..."`: the broker name, used verbatim. Default: the variant in snake case
///   (`HTTPCalls` -> `http_calls`), after `prefix.` when the enum has `#[queues(prefix)]`.
/// - `prefetch = N`: 1..=65535, default 16.
/// - `durable = bool`: default true.
/// - `max_priority = N`: 0..=255, default 10; 0 means no priorities.
/// - `message_ttl = "duration"`: at most 2^32 - 1 ms (about 49.7 days, RabbitMQ's limit),
///   default none.
/// - `timeout = "duration"`: default none.
/// - `retry(...)`: the queue's policy; without it, `RetryPolicy::default()` (one attempt).
/// - `concurrency = N`: at most N (1..=1000) of its jobs run at once across every host on
///   the broker; default none.
/// - `rate = "COUNT/UNIT"` (`"50/s"`, `"10/m"`, `"1000/h"`; at most 1000 a second) and
///   `burst = N` (1..=10000, default the count, and only with `rate`): at most that many
///   of its jobs start per unit across the fleet; default none.
///
/// The operator's grants file may set or override `concurrency` and `rate`
/// (`jobhost_sdk::limits`, docs/flow-control.md).
///
/// `retry(...)` keys: `max_attempts` (at least 1, default 3), `backoff` (`"none"`,
/// `"fixed"` or `"exponential"`, the default); for fixed, `delay` (required); for
/// exponential, `base` (default `"1s"`, at most `max`), `factor` (finite, above 0, default
/// 2.0), `max` (default `"5m"`) and `jitter` (default true). `retry()` takes every default.
/// `delay`, `base` and `max` are at most `jobhost_sdk::MAX_DELAY` (about 24.8 days), the
/// longest a hold queue holds a job.
///
/// Durations are string literals: an integer and an optional unit `ms`, `s`, `m`, `h` or
/// `d` (`"500ms"`, `"2 m"`; a bare integer means seconds), never zero.
///
/// Every mistake (unknown or duplicate key, out-of-range number, bad duration, a key of
/// another backoff kind, duplicate broker names, generics, variants with fields) is a
/// compile error naming the key and the rule, and all are reported at once.
#[proc_macro_derive(Queues, attributes(queues, queue))]
pub fn derive_queues(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    queues::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Implements `jobhost_sdk::Job` for a struct, the job's payload.
///
/// ```ignore
/// #[derive(Debug, Serialize, Deserialize, Job)]
/// #[job(queue = AppQueues::Images, retry(max_attempts = 5))]
/// struct ResizeImage { path: String }
/// ```
///
/// `#[job(...)]` keys:
/// - `queue = Type::Variant`: required; the job's queue, a variant of a
///   `#[derive(Queues)]` enum.
/// - `name = "..."`: the job type name carried in envelopes. Default:
///   `concat!(module_path!(), "::", "TypeName")`, so renaming or moving the struct renames
///   the job; set `name` when producers and consumers may disagree on paths.
/// - `retry(...)`: the job's own policy, the grammar of [`macro@Queues`]. It replaces the
///   queue's policy entirely (keys are not merged); without it the queue's policy applies.
/// - `timeout = "duration"`: overrides the queue's timeout.
/// - `concurrency(key = "field", limit = N)`: at most N (1..=1000) jobs whose payload holds
///   one value under its top-level field `field` run at once across the fleet.
/// - `rate(key = "field", limit = "COUNT/UNIT", burst = N, respect_retry_after)`: the jobs
///   of one key start at most at that rate (the grammar of the queue's `rate`; `burst`
///   optional); with `respect_retry_after`, a job deferred by a service's `Retry-After`
///   holds the key's other jobs back as long.
/// - `unique(key = "field", for = "duration")`: while a job whose payload holds one value
///   under `field` is queued, held or running (at most `for` after it was enqueued), an
///   enqueue of that value through the host, a typed producer or a follow-up is refused and
///   answers the existing job's id; a payload without the field is not unique.
/// - `cron = "0 7 * * *"` with `tz = "Europe/Paris"` (default UTC), or `every = "30s"` (at
///   least 1s): the fleet enqueues one job of this type per tick, with `payload = "JSON"`
///   (default `{}`); `catch_up = N` (0..=1000, default 0) fires up to N ticks no host fired
///   in time. The host checks the expression, the zone and the JSON at load.
///
/// A key is 1 to 64 ASCII letters, digits, `_` or `-`. The operator's grants file may set
/// or override `concurrency`, `rate` and the schedule (by a `[schedules."JOB_TYPE"]`
/// section).
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    job::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
