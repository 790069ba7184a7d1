//! The guest SDK of jobhost: everything a plugin author depends on.
//!
//! # Table of contents
//! - [`prelude`]: the one `use` a plugin needs.
//! - [`RetryPolicy`], [`Backoff`], [`RetryDecision`]: retry policies and their arithmetic,
//!   shared by guests and the host.
//! - [`JobError`], [`JobResultExt`]: how a handler says a job did not complete, and `?`
//!   that says it for any error.
//! - [`Queues`], [`Job`], [`QueueConfig`] and their derives: a plugin's queues and jobs.
//! - [`limits`]: fleet-wide concurrency caps and rate limits a plugin declares on its
//!   queues and job types, in the grammar the operator's grants file writes them.
//! - [`schedule`]: periodic jobs a job type declares, fired once per tick by the fleet.
//! - [`batch`]: the payload of a batch's callback job.
//! - [`plugin!`], [`JobContext`], [`Level`], [`EnqueueError`]: export a crate as a plugin;
//!   what a handler may ask of the host (structured logs, typed follow-up jobs).
//! - [`config`]: the configuration values and secrets the operator gives the plugin.
//! - [`http`] (feature `http`): outbound HTTP to the origins the operator granted, and what
//!   a response means for the job.
//! - [`testing`] (not on wasm): run handlers natively under `cargo test`, with config
//!   values and a stand-in for HTTP servers.
//! - [`parse_duration`], [`DurationError`], [`MAX_DELAY`]: the duration grammar of
//!   attributes and flags, and the longest wait a job can be held for.
//! - [`text`]: which characters of untrusted text are shown escaped, shared with the host.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `http` | [`http`], on the `wasip2` bindings of `wasi:http` |

#![warn(missing_docs)]

pub mod batch;
pub mod config;
mod duration;
mod error;
mod guest;
#[cfg(feature = "http")]
pub mod http;
pub mod limits;
mod policy;
pub mod prelude;
mod queue;
pub mod schedule;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
pub mod text;

pub use duration::{DurationError, MAX_DELAY, parse_duration};
pub use error::{JobError, JobResultExt};
#[doc(hidden)]
pub use guest::__private;
pub use guest::{EnqueueError, JobContext, Level};
pub use jobhost_macros::{Job, Queues};
pub use policy::{Backoff, RetryDecision, RetryPolicy};
pub use queue::{Job, QueueConfig, QueueType, Queues};
