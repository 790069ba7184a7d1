//! The `key = value` and `key(...)` items of an attribute, and typed readers of their values.
//!
//! Syn only: nothing here knows what a queue or a job is. Every reader records a
//! [`syn::Error`] naming the key and returns `None` instead of stopping, so one expansion
//! reports every mistake.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{
    Attribute, Expr, ExprLit, ExprUnary, Ident, Lit, LitStr, Meta, MetaList, MetaNameValue, Path,
    Token, UnOp,
};

use crate::duration::parse_duration;
use crate::errors::Errors;

/// The items of one attribute (or nested list), each key known and written once.
#[derive(Debug, Default)]
pub(crate) struct Args {
    items: Vec<Meta>,
}

impl Args {
    /// The items of every `#[name(...)]` among `attrs`, so two `#[queue(...)]` on one
    /// variant behave as one: a key written in both is a duplicate.
    pub(crate) fn from_attrs(
        attrs: &[Attribute],
        name: &str,
        accepted: &[&str],
        errors: &mut Errors,
    ) -> Self {
        let mut items = Vec::new();
        for attr in attrs.iter().filter(|attr| attr.path().is_ident(name)) {
            let parsed = attr.meta.require_list().and_then(|list| {
                list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            });
            items.extend(errors.ok(parsed).into_iter().flatten());
        }
        Self::checked(items, &format!("#[{name}(...)]"), accepted, errors)
    }

    /// The items inside a nested list such as `retry(...)`; `retry()` has none.
    pub(crate) fn from_list(list: &MetaList, accepted: &[&str], errors: &mut Errors) -> Self {
        let parsed = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated);
        let items = errors.ok(parsed).into_iter().flatten().collect();
        Self::checked(
            items,
            &format!("{}(...)", list.path.to_token_stream()),
            accepted,
            errors,
        )
    }

    /// Like [`Args::from_list`] for a list of `key = value` items only, whose keys may be
    /// Rust keywords (`unique(key = "..", for = "10m")`), which `Meta` does not parse.
    pub(crate) fn from_name_values(
        list: &MetaList,
        accepted: &[&str],
        errors: &mut Errors,
    ) -> Self {
        let parsed = list.parse_args_with(|input: ParseStream<'_>| {
            let mut items = Vec::new();
            while !input.is_empty() {
                let key = Ident::parse_any(input)?;
                let eq_token: Token![=] = input.parse()?;
                let value: Expr = input.parse()?;
                items.push(Meta::NameValue(MetaNameValue {
                    path: Path::from(key),
                    eq_token,
                    value,
                }));
                if !input.is_empty() {
                    input.parse::<Token![,]>()?;
                }
            }
            Ok(items)
        });
        let items = errors.ok(parsed).unwrap_or_default();
        Self::checked(
            items,
            &format!("{}(...)", list.path.to_token_stream()),
            accepted,
            errors,
        )
    }

    fn checked(items: Vec<Meta>, context: &str, accepted: &[&str], errors: &mut Errors) -> Self {
        let mut kept: Vec<Meta> = Vec::new();
        for item in items {
            let Some(key) = item.path().get_ident() else {
                errors.spanned(
                    item.path(),
                    format!(
                        "expected a key in `{context}`, found a path: use one of {}",
                        list(accepted)
                    ),
                );
                continue;
            };
            if !accepted.iter().any(|accepted| key == accepted) {
                errors.at(
                    key.span(),
                    format!(
                        "unknown key `{key}` in `{context}`: expected one of {}",
                        list(accepted)
                    ),
                );
            } else if kept.iter().any(|earlier| earlier.path().is_ident(key)) {
                errors.at(
                    key.span(),
                    format!("duplicate key `{key}` in `{context}`: write it once"),
                );
            } else {
                kept.push(item);
            }
        }
        Self { items: kept }
    }

    /// The item written as `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<&Meta> {
        self.items.iter().find(|item| item.path().is_ident(key))
    }

    /// `default` when `key` is absent, what `read` makes of it when present, and `None`
    /// when `read` refused it (having recorded why).
    pub(crate) fn read_or<T>(
        &self,
        key: &str,
        default: T,
        errors: &mut Errors,
        read: impl FnOnce(&Meta, &mut Errors) -> Option<T>,
    ) -> Option<T> {
        match self.get(key) {
            Some(meta) => read(meta, errors),
            None => Some(default),
        }
    }

    /// Every item, in the order written.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Meta> {
        self.items.iter()
    }
}

/// `` `a`, `b` or `c` ``, for messages listing what may be written.
pub(crate) fn list(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|word| format!("`{word}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

/// The key of an item [`Args`] kept, for messages.
pub(crate) fn key(meta: &Meta) -> String {
    meta.path().to_token_stream().to_string()
}

/// The value of `key = value`; `example` shows a value in the message for `key` or `key(..)`.
fn value<'a>(meta: &'a Meta, example: &str, errors: &mut Errors) -> Option<&'a Expr> {
    if let Meta::NameValue(name_value) = meta {
        let mut expr = &name_value.value;
        // Values forwarded through `macro_rules!` arrive wrapped in invisible groups.
        while let Expr::Group(group) = expr {
            expr = &group.expr;
        }
        return Some(expr);
    }
    let key = key(meta);
    errors.spanned(
        meta,
        format!("`{key}` takes a value: write `{key} = {example}`"),
    );
    None
}

/// A string literal: `key = "..."`.
pub(crate) fn string(meta: &Meta, errors: &mut Errors) -> Option<LitStr> {
    match value(meta, "\"...\"", errors)? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        other => {
            let key = key(meta);
            errors.spanned(
                other,
                format!("`{key}` expects a string literal: write `{key} = \"...\"`"),
            );
            None
        }
    }
}

/// A non-empty string literal, for names.
pub(crate) fn name(meta: &Meta, errors: &mut Errors) -> Option<String> {
    let name = string(meta, errors)?.value();
    if name.is_empty() {
        errors.spanned(meta, format!("`{}` must not be empty", key(meta)));
        return None;
    }
    Some(name)
}

/// A duration literal such as `key = "30s"`, checked by [`parse_duration`].
pub(crate) fn duration(meta: &Meta, errors: &mut Errors) -> Option<Duration> {
    let text = string(meta, errors)?.value();
    parse_duration(&text)
        .map_err(|error| errors.spanned(meta, format!("`{}`: {error}", key(meta))))
        .ok()
}

/// An integer literal within `range`; `rule` words the range for the message
/// ("between 1 and 65535").
pub(crate) fn int<T>(
    meta: &Meta,
    range: RangeInclusive<T>,
    rule: &str,
    errors: &mut Errors,
) -> Option<T>
where
    T: FromStr + PartialOrd + Display,
    T::Err: Display,
{
    let key = key(meta);
    let written = match value(meta, &range.start().to_string(), errors)? {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => match lit.base10_parse::<T>() {
            Ok(number) if range.contains(&number) => return Some(number),
            _ => lit.base10_digits().to_owned(),
        },
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) if matches!(
            **expr,
            Expr::Lit(ExprLit {
                lit: Lit::Int(_),
                ..
            })
        ) =>
        {
            format!("-{}", expr.to_token_stream())
        }
        other => {
            errors.spanned(other, format!("`{key}` expects an integer literal {rule}"));
            return None;
        }
    };
    errors.spanned(meta, format!("`{key}` must be {rule}, got `{written}`"));
    None
}

/// `key = true` or `key = false`.
pub(crate) fn boolean(meta: &Meta, errors: &mut Errors) -> Option<bool> {
    match value(meta, "true", errors)? {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Some(lit.value),
        other => {
            let key = key(meta);
            errors.spanned(other, format!("`{key}` expects `true` or `false`"));
            None
        }
    }
}

/// An integer or float literal, possibly negated: `key = 2`, `key = 1.5`, `key = -2.0`.
/// Range rules are the caller's, so its message can say why.
pub(crate) fn number(meta: &Meta, errors: &mut Errors) -> Option<f64> {
    let expr = value(meta, "2.0", errors)?;
    let (negative, literal) = match expr {
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => (true, &**expr),
        other => (false, other),
    };
    let parsed = match literal {
        Expr::Lit(ExprLit {
            lit: Lit::Float(lit),
            ..
        }) => lit.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit.base10_parse::<f64>().ok(),
        _ => None,
    };
    let Some(number) = parsed else {
        let key = key(meta);
        errors.spanned(
            expr,
            format!("`{key}` expects a number literal, e.g. `{key} = 2.0`"),
        );
        return None;
    };
    Some(if negative { -number } else { number })
}

/// A path value: `key = Type::Variant`.
pub(crate) fn path<'a>(meta: &'a Meta, example: &str, errors: &mut Errors) -> Option<&'a Path> {
    match value(meta, example, errors)? {
        Expr::Path(expr) if expr.qself.is_none() => Some(&expr.path),
        other => {
            let key = key(meta);
            errors.spanned(
                other,
                format!("`{key}` expects a path: write `{key} = {example}`"),
            );
            None
        }
    }
}

/// A nested list: `key(...)`.
pub(crate) fn nested<'a>(meta: &'a Meta, errors: &mut Errors) -> Option<&'a MetaList> {
    if let Meta::List(list) = meta {
        return Some(list);
    }
    let key = key(meta);
    errors.spanned(
        meta,
        format!("`{key}` takes a list: write `{key}(...)`, or `{key}()` for every default"),
    );
    None
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn messages(errors: Errors) -> Vec<String> {
        match errors.finish(Some(())) {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|error| error.to_string()).collect(),
        }
    }

    fn args(attrs: &[Attribute], accepted: &[&str]) -> (Args, Vec<String>) {
        let mut errors = Errors::default();
        let args = Args::from_attrs(attrs, "queue", accepted, &mut errors);
        (args, messages(errors))
    }

    #[test]
    fn items_of_several_attributes_of_the_same_name_are_merged() {
        let attrs: Vec<Attribute> = vec![
            parse_quote!(#[queue(name = "a")]),
            parse_quote!(#[doc = "ignored"]),
            parse_quote!(#[queue(prefetch = 4)]),
        ];
        let (args, errors) = args(&attrs, &["name", "prefetch"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(
            args.get("name").is_some() && args.get("prefetch").is_some(),
            "both kept"
        );
        assert_eq!(args.iter().count(), 2, "the doc attribute is not an item");
    }

    #[test]
    fn unknown_and_duplicate_keys_are_all_reported() {
        let attrs: Vec<Attribute> = vec![
            parse_quote!(#[queue(name = "a", nmae = "b")]),
            parse_quote!(#[queue(name = "c", a::b = 1)]),
        ];
        let (args, errors) = args(&attrs, &["name", "prefetch"]);
        assert_eq!(
            errors,
            [
                "unknown key `nmae` in `#[queue(...)]`: expected one of `name` or `prefetch`",
                "duplicate key `name` in `#[queue(...)]`: write it once",
                "expected a key in `#[queue(...)]`, found a path: use one of `name` or `prefetch`",
            ]
        );
        let kept = args
            .get("name")
            .and_then(|meta| string(meta, &mut Errors::default()));
        assert_eq!(
            kept.map(|lit| lit.value()).as_deref(),
            Some("a"),
            "the first one wins"
        );
    }

    #[test]
    fn readers_accept_their_own_shape() {
        let mut errors = Errors::default();
        assert_eq!(
            duration(&parse_quote!(ttl = "2 m"), &mut errors),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            int::<u16>(&parse_quote!(n = 7), 1..=9, "", &mut errors),
            Some(7)
        );
        assert_eq!(boolean(&parse_quote!(b = false), &mut errors), Some(false));
        assert_eq!(number(&parse_quote!(f = 3), &mut errors), Some(3.0));
        assert_eq!(number(&parse_quote!(f = -1.5), &mut errors), Some(-1.5));
        assert_eq!(
            name(&parse_quote!(n = "x"), &mut errors).as_deref(),
            Some("x")
        );
        let meta: Meta = parse_quote!(queue = A::B);
        assert_eq!(
            path(&meta, "", &mut errors).map(|p| p.segments.len()),
            Some(2)
        );
        assert!(nested(&parse_quote!(retry()), &mut errors).is_some());
        assert!(
            messages(errors).is_empty(),
            "every value had the expected shape"
        );
    }

    #[test]
    fn readers_name_the_key_and_the_rule_when_refusing() {
        let mut errors = Errors::default();
        assert_eq!(duration(&parse_quote!(ttl = "0s"), &mut errors), None);
        assert_eq!(
            int::<u8>(
                &parse_quote!(p = 256),
                0..=255,
                "between 0 and 255",
                &mut errors
            ),
            None
        );
        assert_eq!(
            int::<u8>(
                &parse_quote!(p = -1),
                0..=255,
                "between 0 and 255",
                &mut errors
            ),
            None
        );
        assert_eq!(
            int::<u8>(
                &parse_quote!(p = "1"),
                0..=255,
                "between 0 and 255",
                &mut errors
            ),
            None
        );
        assert_eq!(boolean(&parse_quote!(b = 1), &mut errors), None);
        assert_eq!(number(&parse_quote!(f = x), &mut errors), None);
        assert_eq!(name(&parse_quote!(n = ""), &mut errors), None);
        assert_eq!(string(&parse_quote!(n), &mut errors), None);
        assert!(nested(&parse_quote!(retry = 3), &mut errors).is_none());
        assert_eq!(
            messages(errors),
            [
                "`ttl`: zero duration `0s`: a duration must be positive",
                "`p` must be between 0 and 255, got `256`",
                "`p` must be between 0 and 255, got `-1`",
                "`p` expects an integer literal between 0 and 255",
                "`b` expects `true` or `false`",
                "`f` expects a number literal, e.g. `f = 2.0`",
                "`n` must not be empty",
                "`n` takes a value: write `n = \"...\"`",
                "`retry` takes a list: write `retry(...)`, or `retry()` for every default",
            ]
        );
    }

    #[test]
    fn lists_read_as_prose() {
        assert_eq!(list(&["a"]), "`a`");
        assert_eq!(list(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
