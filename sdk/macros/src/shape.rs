//! Checks on the item a derive is applied to, before its attributes are read (syn only).

use syn::{Data, DeriveInput};

use crate::errors::Errors;

/// The kinds of item a derive can meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemKind {
    Struct,
    Enum,
    Union,
}

impl ItemKind {
    fn of(data: &Data) -> Self {
        match data {
            Data::Struct(_) => Self::Struct,
            Data::Enum(_) => Self::Enum,
            Data::Union(_) => Self::Union,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Struct => "a struct",
            Self::Enum => "an enum",
            Self::Union => "a union",
        }
    }
}

/// Record an error unless `input` is of kind `expected` and has no generics; `derive` is
/// the derive's name and `purpose` what the item must be, for the message.
///
/// Generics are refused because a queue set and a job type are each one concrete broker
/// contract: `Job::NAME` and `Queues::name` could not tell `Foo<A>` from `Foo<B>`.
pub(crate) fn check(
    input: &DeriveInput,
    derive: &str,
    expected: ItemKind,
    purpose: &str,
    errors: &mut Errors,
) {
    let kind = ItemKind::of(&input.data);
    if kind != expected {
        errors.at(
            input.ident.span(),
            format!(
                "`#[derive({derive})]` applies to {}, {purpose}; `{}` is {}",
                expected.word(),
                input.ident,
                kind.word()
            ),
        );
    }
    let generics = &input.generics;
    let message = format!(
        "`#[derive({derive})]` does not support generics: `{}` must be one concrete type, \
         since its names are fixed at compile time",
        input.ident
    );
    if !generics.params.is_empty() {
        errors.spanned(&generics.params, message);
    } else if let Some(where_clause) = &generics.where_clause {
        errors.spanned(where_clause, message);
    }
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn messages(input: DeriveInput, expected: ItemKind) -> Vec<String> {
        let mut errors = Errors::default();
        check(
            &input,
            "Queues",
            expected,
            "one unit variant per queue",
            &mut errors,
        );
        match errors.finish(Some(())) {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|error| error.to_string()).collect(),
        }
    }

    #[test]
    fn the_right_kind_without_generics_passes() {
        assert!(
            messages(
                parse_quote!(
                    enum Q {
                        A,
                    }
                ),
                ItemKind::Enum
            )
            .is_empty()
        );
    }

    #[test]
    fn a_wrong_kind_and_generics_are_both_reported() {
        assert_eq!(
            messages(
                parse_quote!(
                    struct Q<T>(T);
                ),
                ItemKind::Enum
            ),
            [
                "`#[derive(Queues)]` applies to an enum, one unit variant per queue; `Q` is a struct",
                "`#[derive(Queues)]` does not support generics: `Q` must be one concrete type, \
                 since its names are fixed at compile time",
            ]
        );
    }

    #[test]
    fn a_where_clause_alone_counts_as_generics() {
        let input: DeriveInput = parse_quote!(
            enum Q
            where
                Self: Sized,
            {
                A,
            }
        );
        assert_eq!(
            messages(input, ItemKind::Enum).len(),
            1,
            "the where clause is refused"
        );
    }
}
