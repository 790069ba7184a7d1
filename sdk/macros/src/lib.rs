//! The `Queues` and `Job` derives of `jobhost-sdk`.

use proc_macro::TokenStream;

/// Placeholder until the derive lands.
#[proc_macro_derive(Queues, attributes(queues, queue))]
pub fn derive_queues(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}

/// Placeholder until the derive lands.
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
