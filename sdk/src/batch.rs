//! The payload of a batch's callback job: which batch and callback, the batch's counts when
//! the callback fell due, and the context the batch was opened with (see the host's
//! docs/batches.md). A callback's job type declares it as its payload:
//!
//! ```
//! use jobhost_sdk::batch::BatchCallback;
//! use jobhost_sdk::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! #[queues(prefix = "reports")]
//! enum ReportQueues {
//!     Work,
//! }
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! struct Day {
//!     day: String,
//! }
//!
//! /// Enqueued once every part of the day's report ended.
//! #[derive(Debug, Serialize, Deserialize, Job)]
//! #[job(name = "reports.Gather", queue = ReportQueues::Work)]
//! struct Gather(BatchCallback<Day>);
//! ```

use serde::{Deserialize, Serialize};

/// What a batch hands each of its callbacks; `C` is the batch's context (JSON `null` when
/// it was opened without one, so a context-less batch's callback takes `Option<..>` or the
/// default, any JSON value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchCallback<C = serde_json::Value> {
    /// The batch's id.
    pub batch_id: String,
    /// `on_success`, `on_complete` or `on_death`.
    pub callback: String,
    /// Its members.
    pub total: u64,
    /// Those that completed, when the callback fell due.
    pub completed: u64,
    /// Those that went to the dead letters, when the callback fell due.
    pub dead: u64,
    /// The context the batch was opened with.
    pub context: C,
}
