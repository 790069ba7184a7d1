//! What nearly every plugin uses: `use jobhost_sdk::prelude::*;`.
//!
//! The derives' traits and macros ([`Job`], [`Queues`]), the handler's types
//! ([`JobContext`], [`JobError`], [`Level`]) and [`JobResultExt`] for `?`. Serde's derives
//! are not here: the derived code names `serde`, so a plugin depends on it itself.

pub use crate::{Job, JobContext, JobError, JobResultExt, Level, Queues};
