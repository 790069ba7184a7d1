//! Batches from a handler ([`Batch`], [`JobContext::enqueue_batch`],
//! [`JobContext::add_to_batch`]), and the payload of a batch's callback job
//! ([`BatchCallback`]): which batch and callback, the batch's counts when the callback fell
//! due, and the context the batch was opened with (see the host's docs/batches.md).
//!
//! A batch a handler opens is published with its follow-ups when the handler returns
//! `Ok`; each member counts as a follow-up against the job's limits (1,000 by default).
//! Its id and its members' ids are derived from the job's id, so a job run twice (its
//! host died before its ack) opens the same batch, which the fleet counts once.
//!
//! A callback's job type declares [`BatchCallback`] as its payload:
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

use crate::Job;
#[cfg(doc)]
use crate::JobContext;
use crate::guest::EnqueueError;

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

/// Jobs to enqueue as one batch, with the callbacks the fleet enqueues once when they end,
/// for [`JobContext::enqueue_batch`]:
///
/// ```ignore
/// let batch = parts.iter().fold(Batch::new(), |batch, part| batch.job(part));
/// let batch_id = ctx.enqueue_batch(batch.on_complete::<Gather>().context(&day))?;
/// ```
#[derive(Debug, Default)]
pub struct Batch {
    pub(crate) jobs: Vec<(&'static str, Vec<u8>)>,
    pub(crate) on_success: Option<&'static str>,
    pub(crate) on_complete: Option<&'static str>,
    pub(crate) on_death: Option<&'static str>,
    pub(crate) context: Option<Vec<u8>>,
    /// The first job or context that did not encode, returned by the enqueue.
    pub(crate) unencoded: Option<EnqueueError>,
}

impl Batch {
    /// A batch of no jobs yet, without callbacks.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `job` as a member.
    #[must_use]
    pub fn job<J: Job>(mut self, job: &J) -> Self {
        match serde_json::to_vec(job) {
            Ok(payload) => self.jobs.push((J::NAME, payload)),
            Err(cause) => {
                self.unencoded.get_or_insert(EnqueueError::Encode {
                    job_type: J::NAME,
                    cause,
                });
            }
        }
        self
    }

    /// Enqueue a `J` once every member completed.
    #[must_use]
    pub fn on_success<J: Job>(mut self) -> Self {
        self.on_success = Some(J::NAME);
        self
    }

    /// Enqueue a `J` once every member ended, completed or dead-lettered.
    #[must_use]
    pub fn on_complete<J: Job>(mut self) -> Self {
        self.on_complete = Some(J::NAME);
        self
    }

    /// Enqueue a `J` at the first member dead-lettered.
    #[must_use]
    pub fn on_death<J: Job>(mut self) -> Self {
        self.on_death = Some(J::NAME);
        self
    }

    /// Hand each callback `context` as its [`BatchCallback::context`].
    #[must_use]
    pub fn context<C: Serialize>(mut self, context: &C) -> Self {
        match serde_json::to_vec(context) {
            Ok(context) => self.context = Some(context),
            Err(cause) => {
                self.unencoded.get_or_insert(EnqueueError::Encode {
                    job_type: "batch context",
                    cause,
                });
            }
        }
        self
    }
}
