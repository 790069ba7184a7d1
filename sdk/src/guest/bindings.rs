//! The one `wit_bindgen::generate!` of the `plugin` world, so plugin crates never name
//! wit-bindgen: [`crate::plugin!`] exports through the macro generated here.

// Generated code: its unsafe blocks are the canonical-ABI glue, its items carry the WIT docs.
#![allow(
    unsafe_code,
    missing_docs,
    unreachable_pub,
    missing_debug_implementations
)]

wit_bindgen::generate!({
    path: "../wit",
    world: "plugin",
    pub_export_macro: true,
    default_bindings_module: "jobhost_sdk::__private::bindings",
});
