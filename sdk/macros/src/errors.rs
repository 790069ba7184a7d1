//! Collecting every attribute error of one derive, so a user fixes them in one pass.

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// The errors found so far; parsing goes on after each so all are reported together.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Record `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Record `message`, pointing at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Record `message`, pointing at all of `tokens` (a whole `key = value`, say).
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Keep the value of `result`, recording its error.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `value` if nothing went wrong, otherwise every recorded error at once.
    ///
    /// Readers return `None` only after recording why, so a `None` with no error is a bug
    /// in this crate; it still becomes a compile error rather than a panic.
    pub(crate) fn finish<T>(self, value: Option<T>) -> syn::Result<T> {
        match (self.combined, value) {
            (Some(error), _) => Err(error),
            (None, Some(value)) => Ok(value),
            (None, None) => Err(syn::Error::new(
                Span::call_site(),
                "internal error in jobhost-macros: an attribute was refused without a reason",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pushed_error_is_reported() {
        let mut errors = Errors::default();
        errors.at(Span::call_site(), "first");
        errors.at(Span::call_site(), "second");
        let error = errors.finish(Some(())).expect_err("errors were recorded");
        let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second"], "errors are kept in order");
    }

    #[test]
    fn a_value_without_errors_is_returned() {
        assert_eq!(
            Errors::default()
                .finish(Some(7))
                .expect("no error was recorded"),
            7
        );
    }

    #[test]
    fn a_missing_value_without_errors_is_still_an_error() {
        assert!(
            Errors::default().finish(None::<()>).is_err(),
            "never a silent success"
        );
    }
}
