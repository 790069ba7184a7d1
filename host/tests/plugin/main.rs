//! Plugins in the engine, without a broker: loading and what is refused, the compiled-plugin
//! cache, every outcome of real components, the sandbox, the host-call budgets, guest logs,
//! and outbound HTTP (and HTTPS, with feature `tls`) against local servers the tests start.
//!
//! The tests share one engine and load each fixture once (`support::plugin`). The tests
//! that measure this process's memory are in the `plugin_memory` binary, alone.
//!
//! ```text
//! cargo test -p jobhost --test plugin
//! ```

#[path = "../support/mod.rs"]
mod support;

mod plugin_budgets;
mod plugin_cache;
mod plugin_load;
mod plugin_load_deadline;
mod plugin_logs;
mod plugin_outbound;
mod plugin_outbound_slots;
mod plugin_outbound_tls;
mod plugin_outcomes;
mod plugin_replay;
mod plugin_sandbox;
