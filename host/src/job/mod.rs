//! The job vocabulary shared by the worker, the policy, the admin API and the plugin layer,
//! free of wasmtime and of the broker.
//!
//! - [`Manifest`], [`JobSpec`], [`ManifestError`]: what a plugin serves, and why a manifest
//!   is refused.
//! - [`Invocation`], [`Outcome`], [`FollowUp`]: one delivery to run, and what became of it.

mod invocation;
mod manifest;

pub use invocation::{FollowUp, Invocation, Outcome};
pub use manifest::{JobSpec, Manifest, ManifestError};
