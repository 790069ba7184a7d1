//! The expansion of `#[derive(Job)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::{emit, job_attrs, limits, schedule};

/// `impl jobhost_sdk::Job` for a checked struct, or every error found in it.
pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let spec = job_attrs::parse(input)?;
    let ident = &spec.ident;
    let name = match &spec.name {
        Some(name) => quote!(#name),
        None => {
            let type_name = ident.unraw().to_string();
            quote!(::core::concat!(::core::module_path!(), "::", #type_name))
        }
    };
    let (queues, queue) = (&spec.queues, &spec.queue);
    let retry = match &spec.retry {
        Some(retry) => {
            let policy = emit::retry_policy(retry);
            quote!(::core::option::Option::Some(#policy))
        }
        None => quote!(::core::option::Option::None),
    };
    let timeout = emit::optional_duration(spec.timeout);
    let limits = limits::emit_job(&spec.limits);
    let schedule = schedule::emit(spec.schedule.as_ref());
    Ok(quote! {
        #[automatically_derived]
        impl ::jobhost_sdk::Job for #ident {
            const NAME: &'static str = #name;
            type Queues = #queues;
            const QUEUE: Self::Queues = #queue;

            fn retry_policy() -> ::core::option::Option<::jobhost_sdk::RetryPolicy> {
                #retry
            }

            fn timeout() -> ::core::option::Option<::core::time::Duration> {
                #timeout
            }

            fn limits() -> ::jobhost_sdk::limits::JobLimits {
                #limits
            }

            fn schedule() -> ::core::option::Option<::jobhost_sdk::schedule::Schedule> {
                #schedule
            }
        }
    })
}
