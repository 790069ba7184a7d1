//! `#[queues(...)]` on the enum and `#[queue(...)]` on its variants (syn only).

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, Variant};

use crate::attrs::{self, Args};
use crate::errors::Errors;
use crate::limits;
use crate::retry::{self, RetrySpec};
use crate::shape::{self, ItemKind};

/// A checked `#[derive(Queues)]` enum.
#[derive(Debug)]
pub(crate) struct QueueSet {
    pub(crate) ident: Ident,
    pub(crate) queues: Vec<QueueSpec>,
}

/// One checked variant, mirroring `jobhost_sdk::QueueConfig`.
#[derive(Debug)]
pub(crate) struct QueueSpec {
    pub(crate) variant: Ident,
    pub(crate) name: String,
    /// Where the name came from: its `name = ..` key, or the variant it was derived from.
    name_span: Span,
    pub(crate) prefetch: u16,
    pub(crate) durable: bool,
    pub(crate) queue_type: QueueType,
    pub(crate) max_priority: u8,
    pub(crate) message_ttl: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    /// `None` when the variant writes no `retry(...)`.
    pub(crate) retry: Option<RetrySpec>,
    /// Its fleet-wide cap and rate limit.
    pub(crate) limits: limits::QueueLimits,
}

const QUEUE_KEYS: &[&str] = &[
    "name",
    "prefetch",
    "durable",
    "queue_type",
    "message_ttl",
    "max_priority",
    "timeout",
    "retry",
    "concurrency",
    "rate",
    "burst",
];

/// Read and check the enum and all its variants, reporting every error at once.
pub(crate) fn parse(input: &DeriveInput) -> syn::Result<QueueSet> {
    let mut errors = Errors::default();
    shape::check(
        input,
        "Queues",
        ItemKind::Enum,
        "one unit variant per queue",
        &mut errors,
    );
    reject_misplaced(
        &input.attrs,
        "queue",
        "configures one queue and belongs on a variant; on the enum, write `#[queues(prefix = \"...\")]`",
        &mut errors,
    );
    let args = Args::from_attrs(&input.attrs, "queues", &["prefix"], &mut errors);
    let prefix = args
        .read_or("prefix", None, &mut errors, |meta, errors| {
            attrs::name(meta, errors).map(Some)
        })
        .flatten();
    let Data::Enum(data) = &input.data else {
        return errors.finish(None);
    };
    if data.variants.is_empty() {
        errors.at(
            input.ident.span(),
            format!(
                "`{}` has no variants: a queue set needs at least one queue",
                input.ident
            ),
        );
    }
    let queues: Vec<QueueSpec> = data
        .variants
        .iter()
        .filter_map(|variant| queue(variant, prefix.as_deref(), &mut errors))
        .collect();
    reject_duplicate_names(&queues, &mut errors);
    errors.finish(Some(QueueSet {
        ident: input.ident.clone(),
        queues,
    }))
}

fn queue(variant: &Variant, prefix: Option<&str>, errors: &mut Errors) -> Option<QueueSpec> {
    let ident = &variant.ident;
    let unit = matches!(variant.fields, Fields::Unit);
    if !unit {
        errors.spanned(
            &variant.fields,
            format!(
                "variant `{ident}` has fields, but a queue is a unit variant: write `{ident}` alone"
            ),
        );
    }
    reject_misplaced(
        &variant.attrs,
        "queues",
        "belongs on the enum; on a variant, write `#[queue(...)]`",
        errors,
    );
    let args = Args::from_attrs(&variant.attrs, "queue", QUEUE_KEYS, errors);
    let name = match args.get("name") {
        // An explicit name is the broker name, verbatim: the prefix only shapes defaults.
        Some(meta) => attrs::name(meta, errors).map(|name| (name, meta.span())),
        None => Some((default_name(ident, prefix), ident.span())),
    };
    let prefetch = args.read_or("prefetch", 16, errors, |meta, errors| {
        attrs::int(meta, 1..=u16::MAX, "between 1 and 65535", errors)
    });
    let durable = args.read_or("durable", true, errors, attrs::boolean);
    let queue_type = args.read_or("queue_type", QueueType::Classic, errors, read_queue_type);
    if let (Some(false), Some(QueueType::Quorum), Some(meta)) =
        (durable, queue_type, args.get("durable"))
    {
        errors.spanned(
            meta,
            "`durable = false` does not apply to `queue_type = \"quorum\"`: a quorum queue is \
             always durable; remove `durable = false`, or write `queue_type = \"classic\"`",
        );
    }
    let max_priority = args.read_or("max_priority", 10, errors, |meta, errors| {
        attrs::int(
            meta,
            0..=u8::MAX,
            "between 0 and 255 (0 means no priorities)",
            errors,
        )
    });
    let message_ttl = args.read_or("message_ttl", None, errors, message_ttl);
    let timeout = args.read_or("timeout", None, errors, optional_duration);
    let retry = args.read_or("retry", None, errors, |meta, errors| {
        attrs::nested(meta, errors)
            .and_then(|list| retry::parse(list, errors))
            .map(Some)
    });
    let limits = limits::queue(&args, errors);
    let (name, name_span) = name?;
    unit.then_some(QueueSpec {
        variant: ident.clone(),
        name,
        name_span,
        prefetch: prefetch?,
        durable: durable?,
        queue_type: queue_type?,
        max_priority: max_priority?,
        message_ttl: message_ttl?,
        timeout: timeout?,
        retry: retry?,
        limits: limits?,
    })
}

/// The value of `queue_type = "..."`, mirroring `jobhost_sdk::QueueType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueType {
    Classic,
    Quorum,
}

fn read_queue_type(meta: &syn::Meta, errors: &mut Errors) -> Option<QueueType> {
    let written = attrs::string(meta, errors)?.value();
    match written.as_str() {
        "classic" => Some(QueueType::Classic),
        "quorum" => Some(QueueType::Quorum),
        _ => {
            errors.spanned(
                meta,
                format!("`queue_type` must be \"classic\" or \"quorum\", got \"{written}\""),
            );
            None
        }
    }
}

/// Both attributes are helpers of this derive, so rustc accepts either anywhere on the
/// enum; one in the wrong place would otherwise be ignored without a word.
fn reject_misplaced(attrs: &[Attribute], name: &str, rule: &str, errors: &mut Errors) {
    for attr in attrs.iter().filter(|attr| attr.path().is_ident(name)) {
        errors.spanned(attr, format!("`#[{name}(...)]` {rule}"));
    }
}

fn optional_duration(meta: &syn::Meta, errors: &mut Errors) -> Option<Option<Duration>> {
    attrs::duration(meta, errors).map(Some)
}

/// The longest `x-message-ttl` RabbitMQ accepts: a 32-bit count of milliseconds.
const MAX_MESSAGE_TTL: Duration = Duration::from_millis(u32::MAX as u64);

/// `message_ttl`: a duration RabbitMQ accepts as `x-message-ttl`; a longer one would make
/// the broker refuse to declare the queue, long after the plugin compiled and loaded.
fn message_ttl(meta: &syn::Meta, errors: &mut Errors) -> Option<Option<Duration>> {
    let ttl = attrs::duration(meta, errors)?;
    if ttl > MAX_MESSAGE_TTL {
        errors.spanned(
            meta,
            format!(
                "`message_ttl` of {ttl:?} exceeds the longest message TTL RabbitMQ accepts, \
                 {MAX_MESSAGE_TTL:?} (2^32 - 1 ms, about 49.7 days): lower it, or leave it out \
                 for messages that never expire"
            ),
        );
        return None;
    }
    Some(Some(ttl))
}

/// `prefix.snake_case` of the variant, or just `snake_case` without a prefix.
fn default_name(variant: &Ident, prefix: Option<&str>) -> String {
    let snake = snake_case(&variant.unraw().to_string());
    match prefix {
        Some(prefix) => format!("{prefix}.{snake}"),
        None => snake,
    }
}

/// `HTTPCalls` -> `http_calls`, `ResizeImages` -> `resize_images`, `V2Images` -> `v2_images`:
/// a word starts at an uppercase letter that follows a lowercase letter or a digit, or that
/// ends a run of capitals (the `C` of `HTTPCalls`).
fn snake_case(ident: &str) -> String {
    let chars: Vec<char> = ident.chars().collect();
    let mut snake = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let previous = chars[i - 1];
            let next_is_lower = chars.get(i + 1).is_some_and(|next| next.is_lowercase());
            let starts_word = previous.is_lowercase()
                || previous.is_ascii_digit()
                || (previous.is_uppercase() && next_is_lower);
            if starts_word {
                snake.push('_');
            }
        }
        snake.extend(c.to_lowercase());
    }
    snake
}

/// Two variants with one broker name would silently share a queue.
fn reject_duplicate_names(queues: &[QueueSpec], errors: &mut Errors) {
    for (i, queue) in queues.iter().enumerate() {
        if let Some(first) = queues[..i]
            .iter()
            .find(|earlier| earlier.name == queue.name)
        {
            errors.at(
                queue.name_span,
                format!(
                    "duplicate queue name `{}`: variants `{}` and `{}` would share one broker \
                     queue; give one of them another `name = \"...\"`",
                    queue.name, first.variant, queue.variant
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn errors_of(input: DeriveInput) -> Vec<String> {
        let error = parse(&input).expect_err("the enum has mistakes");
        error.into_iter().map(|error| error.to_string()).collect()
    }

    #[test]
    fn snake_case_splits_words_and_acronyms() {
        for (ident, snake) in [
            ("Emails", "emails"),
            ("HTTPCalls", "http_calls"),
            ("ResizeImages", "resize_images"),
            ("V2Images", "v2_images"),
            ("IOError", "io_error"),
            ("Images2", "images2"),
            ("A", "a"),
            ("already_snake", "already_snake"),
        ] {
            assert_eq!(snake_case(ident), snake, "snake case of `{ident}`");
        }
    }

    #[test]
    fn defaults_apply_and_the_prefix_shapes_only_default_names() {
        let set = parse(&parse_quote! {
            #[queues(prefix = "myapp")]
            enum AppQueues {
                HTTPCalls,
                #[queue(name = "legacy-images", prefetch = 4, durable = false)]
                Images,
                #[queue(max_priority = 0, message_ttl = "1h", timeout = "30", retry())]
                r#Reports,
            }
        })
        .expect("a valid enum");
        let names: Vec<&str> = set.queues.iter().map(|queue| queue.name.as_str()).collect();
        assert_eq!(
            names,
            ["myapp.http_calls", "legacy-images", "myapp.reports"]
        );
        let [calls, images, reports] = &set.queues[..] else {
            panic!("three queues")
        };
        assert_eq!(
            (calls.prefetch, calls.durable, calls.max_priority),
            (16, true, 10)
        );
        assert_eq!(
            (calls.message_ttl, calls.timeout, &calls.retry),
            (None, None, &None)
        );
        assert_eq!((images.prefetch, images.durable), (4, false));
        assert_eq!(reports.max_priority, 0);
        assert_eq!(reports.message_ttl, Some(Duration::from_secs(3600)));
        assert_eq!(reports.timeout, Some(Duration::from_secs(30)));
        assert_eq!(
            reports.retry.as_ref().map(|retry| retry.max_attempts),
            Some(3)
        );
    }

    #[test]
    fn a_message_ttl_longer_than_rabbitmq_accepts_is_refused_naming_the_limit() {
        let errors = errors_of(parse_quote! {
            enum Q { #[queue(message_ttl = "50d")] Slow }
        });
        assert_eq!(
            errors,
            [
                "`message_ttl` of 4320000s exceeds the longest message TTL RabbitMQ accepts, \
                 4294967.295s (2^32 - 1 ms, about 49.7 days): lower it, or leave it out for \
                 messages that never expire"
            ]
        );
        assert!(
            parse(&parse_quote! { enum Q { #[queue(message_ttl = "4294967295ms")] Slow } }).is_ok(),
            "the limit itself is accepted"
        );
    }

    #[test]
    fn queue_type_defaults_to_classic_and_takes_quorum() {
        let set = parse(&parse_quote! {
            enum Q { Plain, #[queue(queue_type = "quorum")] Replicated }
        })
        .expect("a valid enum");
        let types: Vec<QueueType> = set.queues.iter().map(|queue| queue.queue_type).collect();
        assert_eq!(types, [QueueType::Classic, QueueType::Quorum]);
    }

    #[test]
    fn an_unknown_queue_type_and_a_transient_quorum_queue_are_refused() {
        let errors = errors_of(parse_quote! {
            enum Q {
                #[queue(queue_type = "stream")]
                A,
                #[queue(queue_type = "quorum", durable = false)]
                B,
            }
        });
        assert_eq!(
            errors,
            [
                "`queue_type` must be \"classic\" or \"quorum\", got \"stream\"",
                "`durable = false` does not apply to `queue_type = \"quorum\"`: a quorum queue \
                 is always durable; remove `durable = false`, or write `queue_type = \"classic\"`",
            ]
        );
    }

    #[test]
    fn duplicate_names_after_defaults_are_refused() {
        let errors = errors_of(parse_quote! {
            enum Q { Emails, #[queue(name = "emails")] Mail }
        });
        assert_eq!(
            errors,
            [
                "duplicate queue name `emails`: variants `Emails` and `Mail` would share one \
              broker queue; give one of them another `name = \"...\"`"
            ]
        );
    }

    #[test]
    fn every_mistake_of_every_variant_is_reported() {
        let errors = errors_of(parse_quote! {
            #[queues(prefix = "")]
            enum Q {
                #[queue(prefetch = 0, max_priority = 256)]
                A(u8),
                #[queue(message_ttl = "0s", retry(max_attempts = 0), colour = "red")]
                B,
            }
        });
        assert_eq!(errors.len(), 7, "{errors:#?}");
    }

    #[test]
    fn attributes_in_the_wrong_place_are_refused() {
        let errors = errors_of(parse_quote! {
            #[queue(name = "a")]
            enum Q { #[queues(prefix = "p")] A }
        });
        assert_eq!(
            errors,
            [
                "`#[queue(...)]` configures one queue and belongs on a variant; on the enum, \
                 write `#[queues(prefix = \"...\")]`",
                "`#[queues(...)]` belongs on the enum; on a variant, write `#[queue(...)]`",
            ]
        );
    }

    #[test]
    fn an_empty_enum_is_refused() {
        assert_eq!(
            errors_of(parse_quote!(
                enum Q {}
            ))
            .len(),
            1
        );
    }
}
