//! Tokens shared by both expansions: durations and retry policies as SDK values.

use std::time::Duration;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use crate::retry::{BackoffSpec, RetrySpec};

/// A `core::time::Duration` constant expression.
pub(crate) fn duration(duration: Duration) -> TokenStream {
    let (secs, nanos) = (duration.as_secs(), duration.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

/// An `Option<Duration>` expression.
pub(crate) fn optional_duration(duration: Option<Duration>) -> TokenStream {
    match duration {
        Some(value) => {
            let value = self::duration(value);
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// A `jobhost_sdk::RetryPolicy` expression.
pub(crate) fn retry_policy(spec: &RetrySpec) -> TokenStream {
    let max_attempts = spec.max_attempts;
    let backoff = match &spec.backoff {
        BackoffSpec::None => quote!(::jobhost_sdk::Backoff::None),
        BackoffSpec::Fixed(delay) => {
            let delay = duration(*delay);
            quote!(::jobhost_sdk::Backoff::Fixed(#delay))
        }
        BackoffSpec::Exponential {
            base,
            factor,
            max,
            jitter,
        } => {
            let (base, max) = (duration(*base), duration(*max));
            // Finite by construction (`retry::parse` refuses the rest), as `f64_suffixed` needs.
            let factor = Literal::f64_suffixed(*factor);
            quote!(::jobhost_sdk::Backoff::Exponential {
                base: #base,
                factor: #factor,
                max: #max,
                jitter: #jitter,
            })
        }
    };
    quote!(::jobhost_sdk::RetryPolicy { max_attempts: #max_attempts, backoff: #backoff })
}
