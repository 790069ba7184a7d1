//! The `jobhost` binary as a user runs it, on the memory backend: `jobhost run` driven
//! through its client commands (enqueue, dead letters, pausing and cancelling, exit codes,
//! Ctrl-C), the grants file, `jobhost dev`, `jobhost new` + `jobhost build`, and how errors
//! print their causes.
//!
//! Needs no broker; `cli_scaffold` compiles a plugin crate for `wasm32-wasip2`.
//!
//! ```text
//! cargo test -p jobhost --test cli
//! ```

#[path = "../support/mod.rs"]
mod support;

mod cli_dev;
mod cli_grants;
mod cli_run;
mod cli_scaffold;
mod error_chains;
