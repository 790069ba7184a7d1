//! The guest side of the plugin contract: the WIT bindings, [`JobContext`] and the
//! machinery behind [`crate::plugin!`].
//!
//! The bindings are generated here once, so plugin crates depend on `jobhost-sdk` alone.
//! Everything compiles for the host target too (imports are then unreachable stubs), which
//! lets plugin crates be ordinary workspace members and the host share the policy types.

pub mod bindings;
mod context;
mod dispatch;
mod manifest;
mod panic;
mod plugin_macro;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use context::{EnqueueError, JobContext, Level};

/// What [`crate::plugin!`] expands to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use super::bindings;
    pub use super::bindings::exports::jobhost::plugin::handler::Guest;
    pub use super::bindings::jobhost::plugin::types::{JobContext, JobError, Manifest};
    pub use super::dispatch::{Route, handle, run};
    pub use super::manifest::{job_config, manifest};
    pub use super::panic::install_panic_hook;
}

/// `duration` in whole milliseconds, as the WIT carries it; saturates at `u64::MAX`
/// (half a billion years), which no policy or deferral can mean literally.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
