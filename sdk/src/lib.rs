//! The guest SDK of jobhost: everything a plugin author depends on.
//!
//! # Table of contents
//! - [`RetryPolicy`], [`Backoff`], [`RetryDecision`]: retry policies and their arithmetic,
//!   shared by guests and the host.
//! - [`JobError`]: how a handler says a job did not complete.
//! - [`Queues`], [`Job`], [`QueueConfig`] and their derives: a plugin's queues and jobs.
//! - [`plugin!`], [`JobContext`], [`Level`], [`EnqueueError`]: export a crate as a plugin;
//!   what a handler may ask of the host (structured logs, typed follow-up jobs).
//! - [`parse_duration`], [`DurationError`]: the duration grammar of attributes and flags.

#![warn(missing_docs)]

mod duration;
mod error;
mod guest;
mod policy;
mod queue;

pub use duration::{DurationError, parse_duration};
pub use error::JobError;
#[doc(hidden)]
pub use guest::__private;
pub use guest::{EnqueueError, JobContext, Level};
pub use jobhost_macros::{Job, Queues};
pub use policy::{Backoff, RetryDecision, RetryPolicy};
pub use queue::{Job, QueueConfig, Queues};
