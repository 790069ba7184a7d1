//! The host's memory under hostile plugins, measured as this process's RSS (`VmRSS`, and
//! its peak `VmHWM` reset before each measurement): floods of the host imports, and a
//! 1 GiB outbound response cut at its cap.
//!
//! A binary of its own because the measurement is of the whole process: no other test's
//! guests may run beside it. Its tests take turns through [`MEASURING`].
//!
//! ```text
//! cargo test -p jobhost --test plugin_memory -- --nocapture
//! ```

#[path = "../support/mod.rs"]
mod support;

mod plugin_flood_memory;
mod plugin_outbound_memory;

/// Held by each test of this binary for its whole run, so the process's memory is one
/// test's at a time.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
