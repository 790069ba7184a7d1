//! The expansion of `#[derive(Queues)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::queues_attrs::{self, QueueSpec, QueueType};
use crate::{emit, limits};

/// `impl jobhost_sdk::Queues` for a checked enum, or every error found in it.
pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let set = queues_attrs::parse(input)?;
    let ident = &set.ident;
    let variants: Vec<_> = set.queues.iter().map(|queue| &queue.variant).collect();
    let names = set.queues.iter().map(|queue| &queue.name);
    let configs = set.queues.iter().map(config);
    let limits = set
        .queues
        .iter()
        .map(|queue| limits::emit_queue(&queue.limits));
    Ok(quote! {
        #[automatically_derived]
        impl ::jobhost_sdk::Queues for #ident {
            fn all() -> &'static [Self] {
                &[#(Self::#variants),*]
            }

            fn name(&self) -> &'static str {
                match self {
                    #(Self::#variants => #names,)*
                }
            }

            fn config(&self) -> ::jobhost_sdk::QueueConfig {
                match self {
                    #(Self::#variants => #configs,)*
                }
            }

            fn limits(&self) -> ::jobhost_sdk::limits::QueueLimits {
                match self {
                    #(Self::#variants => #limits,)*
                }
            }
        }
    })
}

fn config(queue: &QueueSpec) -> TokenStream {
    let QueueSpec {
        prefetch,
        durable,
        max_priority,
        ..
    } = queue;
    let queue_type = match queue.queue_type {
        QueueType::Classic => quote!(::jobhost_sdk::QueueType::Classic),
        QueueType::Quorum => quote!(::jobhost_sdk::QueueType::Quorum),
    };
    let message_ttl = emit::optional_duration(queue.message_ttl);
    let timeout = emit::optional_duration(queue.timeout);
    let retry = match &queue.retry {
        Some(retry) => emit::retry_policy(retry),
        None => quote!(<::jobhost_sdk::RetryPolicy as ::core::default::Default>::default()),
    };
    quote!(::jobhost_sdk::QueueConfig {
        name: ::std::string::String::from(::jobhost_sdk::Queues::name(self)),
        prefetch: #prefetch,
        durable: #durable,
        queue_type: #queue_type,
        max_priority: #max_priority,
        message_ttl: #message_ttl,
        retry: #retry,
        timeout: #timeout,
    })
}
