//! The vocabulary of batches (see docs/batches.md): which callbacks a batch has, how a
//! member ends for it, and which batch a handler's follow-up joins.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Which callback of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Callback {
    /// Every member completed.
    OnSuccess,
    /// Every member ended, completed or dead-lettered.
    OnComplete,
    /// A member was dead-lettered: fired at the first.
    OnDeath,
}

impl Callback {
    /// Every callback, in the order they are shown.
    pub const ALL: [Self; 3] = [Self::OnSuccess, Self::OnComplete, Self::OnDeath];

    /// Its name on the wire and in the CLI: `on_success`, `on_complete`, `on_death`.
    pub fn name(self) -> &'static str {
        match self {
            Self::OnSuccess => "on_success",
            Self::OnComplete => "on_complete",
            Self::OnDeath => "on_death",
        }
    }
}

/// The job type each callback enqueues, when the batch has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callbacks {
    /// Enqueued once every member completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<String>,
    /// Enqueued once every member ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<String>,
    /// Enqueued at the first member dead-lettered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_death: Option<String>,
}

impl Callbacks {
    /// The job type of `callback`, if the batch has it.
    pub fn get(&self, callback: Callback) -> Option<&str> {
        match callback {
            Callback::OnSuccess => self.on_success.as_deref(),
            Callback::OnComplete => self.on_complete.as_deref(),
            Callback::OnDeath => self.on_death.as_deref(),
        }
    }

    /// Each callback the batch has, with its job type.
    pub fn each(&self) -> impl Iterator<Item = (Callback, &str)> {
        Callback::ALL
            .into_iter()
            .filter_map(|callback| Some((callback, self.get(callback)?)))
    }
}

/// How a member ended for its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberEnd {
    /// Its handler completed.
    Completed,
    /// It went to the dead letters: dead-lettered, expired or cancelled.
    Dead,
}

/// The batch a handler's follow-up joins.
#[derive(Debug, Clone, PartialEq)]
pub enum Joins {
    /// A batch the attempt opened (`enqueue-batch`): published, before its members, with
    /// its callbacks and context.
    Opened {
        /// The batch.
        batch: Uuid,
        /// Its callbacks.
        callbacks: Callbacks,
        /// What its callbacks are handed.
        context: Option<serde_json::Value>,
    },
    /// The batch the handler's own job is a member of (`add-to-batch`): the new members
    /// are added to it before the job's own end is recorded.
    Parent {
        /// The batch.
        batch: Uuid,
    },
}

impl Joins {
    /// The batch.
    pub fn batch(&self) -> Uuid {
        match self {
            Self::Opened { batch, .. } | Self::Parent { batch } => *batch,
        }
    }
}

/// A follow-up's batch, shared by the members that join it together.
pub type SharedJoins = Arc<Joins>;

/// The id of the `n`th batch (from 0) an attempt of `job_id` opens: the same on every
/// attempt, so a job run twice (its host died before its ack) opens the same batch, which
/// the fleet counts once.
pub fn opened_batch_id(job_id: Uuid, n: u32) -> Uuid {
    Uuid::new_v5(&job_id, format!("batch.{n}").as_bytes())
}

/// The id of the `i`th job (from 0) of the `n`th group a job enqueues into a batch: the
/// same on every attempt, for the same reason.
pub fn member_job_id(job_id: Uuid, n: u32, i: usize) -> Uuid {
    Uuid::new_v5(&job_id, format!("member.{n}.{i}").as_bytes())
}
