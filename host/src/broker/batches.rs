//! What the fleet keeps of its batches, on either backend ([`Batches`]): one log of
//! [`BatchRecord`]s, in the order the broker took them, that every host follows and folds
//! (see `crate::batches` for the fold and the callbacks).
//!
//! # Contract
//! - [`Backend::record_batch`](super::Backend::record_batch) returns once the broker has
//!   the record; a follower sees it
//!   after every record the broker had taken before it. A batch's members are published
//!   after its [`BatchRecord::Open`] is taken, and a member's [`BatchRecord::End`] before its
//!   delivery is acked, so a follower meets a batch's opening before any of its endings,
//!   and no ending is lost to a host that dies.
//! - [`Batches::follow_batches`] hands every record the broker still keeps, oldest first,
//!   then each new one; across reconnects it starts again from the oldest, so a follower
//!   sees a record more than once, and folding one twice changes nothing.
//! - A record on the wire is hostile until [`BatchRecord::decode`] accepted it: at most
//!   [`RECORD_MAX_BYTES`] of JSON of the [`BatchRecord`] shape, at most [`BATCH_MAX`] members,
//!   job types of at most [`NAME_MAX`] bytes without control characters, a context of at
//!   most [`CONTEXT_MAX_BYTES`]. A follower skips what is not one, with a warning.
//!
//! | backend | records kept |
//! |---|---|
//! | RabbitMQ | the stream queue [`BATCHES_STREAM`], for [`BATCHES_RETENTION`] |
//! | memory | the last [`MEMORY_RECORDS`], in the process |

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::BrokerError;
use crate::job::{Callback, Callbacks, MemberEnd};
use crate::text::{NAME_MAX, bounded};

/// The RabbitMQ stream queue of every batch record, which every host follows.
pub const BATCHES_STREAM: &str = "jobhost.batches";

/// How long the broker keeps a record on [`BATCHES_STREAM`] at least (its `x-max-age`):
/// a batch whose members run longer than this is forgotten by hosts that start later.
pub const BATCHES_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most records the memory backend keeps for followers that join later.
pub const MEMORY_RECORDS: usize = 1_000_000;

/// The most members of one batch.
pub const BATCH_MAX: usize = 100_000;

/// The largest record a follower reads: an opening of [`BATCH_MAX`] members and the
/// largest context fit.
pub const RECORD_MAX_BYTES: usize = 4 * 1024 * 1024 + 2 * CONTEXT_MAX_BYTES;

/// The largest context a batch hands its callbacks, as JSON.
pub const CONTEXT_MAX_BYTES: usize = 16 * 1024;

/// A batch opened: its members, its callbacks and what they are handed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    /// The batch.
    pub batch: Uuid,
    /// The job ids of its members, each published after this record.
    pub members: Vec<Uuid>,
    /// Its callbacks.
    pub callbacks: Callbacks,
    /// The JSON each callback's payload carries as `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
    /// When, on the opening host's clock, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// One entry of the fleet's batch log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum BatchRecord {
    /// A batch opened.
    Open(Opened),
    /// A member added jobs to its batch, before its own end.
    Add {
        /// The batch.
        batch: Uuid,
        /// The member that added them.
        by: Uuid,
        /// The new members' job ids, each published after this record.
        members: Vec<Uuid>,
    },
    /// A member ended for good, as settled by some host.
    End {
        /// Its batch.
        batch: Uuid,
        /// The member.
        job_id: Uuid,
        /// How.
        end: MemberEnd,
    },
    /// A host's mark in the log: once the host reads it back, it has read every record
    /// the broker took before it (a callback's firing among them).
    Mark {
        /// Which mark.
        mark: Uuid,
    },
    /// A callback's job was enqueued.
    Fired {
        /// The batch.
        batch: Uuid,
        /// Which callback.
        callback: Callback,
        /// Its job.
        job_id: Uuid,
    },
}

/// Why a message of the batch log is not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a batch record: {0}")]
pub struct BadBatchRecord(String);

impl BatchRecord {
    /// The batch it is about; none for a mark.
    pub fn batch(&self) -> Option<Uuid> {
        match self {
            Self::Open(opened) => Some(opened.batch),
            Self::Add { batch, .. } | Self::End { batch, .. } | Self::Fired { batch, .. } => {
                Some(*batch)
            }
            Self::Mark { .. } => None,
        }
    }

    /// The record's JSON body.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a batch record always serializes")
    }

    /// The record in `body`, checked as [the module doc](self) says.
    pub fn decode(body: &[u8]) -> Result<Self, BadBatchRecord> {
        if body.len() > RECORD_MAX_BYTES {
            return Err(BadBatchRecord(format!(
                "{} bytes, the limit is {RECORD_MAX_BYTES}",
                body.len()
            )));
        }
        let record: Self = serde_json::from_slice(body)
            .map_err(|err| BadBatchRecord(bounded(&err.to_string(), NAME_MAX).into_owned()))?;
        record.check()?;
        Ok(record)
    }

    /// Whether an opening is within bounds, so that what an API caller asks is refused
    /// before anything is published.
    pub fn check(&self) -> Result<(), BadBatchRecord> {
        let members = match self {
            Self::Open(opened) => &opened.members,
            Self::Add { members, .. } => members,
            Self::End { .. } | Self::Fired { .. } | Self::Mark { .. } => return Ok(()),
        };
        if members.is_empty() || members.len() > BATCH_MAX {
            return Err(BadBatchRecord(format!(
                "a batch has 1 to {BATCH_MAX} members, not {}",
                members.len()
            )));
        }
        let Self::Open(opened) = self else {
            return Ok(());
        };
        if let Some(context) = &opened.context {
            let bytes = serde_json::to_string(context).map_or(usize::MAX, |json| json.len());
            if bytes > CONTEXT_MAX_BYTES {
                return Err(BadBatchRecord(format!(
                    "its context is {bytes} bytes of JSON, the limit is {CONTEXT_MAX_BYTES}"
                )));
            }
        }
        for (callback, job_type) in opened.callbacks.each() {
            if job_type.is_empty()
                || job_type.len() > NAME_MAX
                || job_type.chars().any(char::is_control)
            {
                return Err(BadBatchRecord(format!(
                    "the {} job type `{}` is not a job type name",
                    callback.name(),
                    bounded(job_type, NAME_MAX)
                )));
            }
        }
        Ok(())
    }
}

/// Following the fleet's batch log, on the broker the fleet shares; records are appended
/// with [`Backend::record_batch`](super::Backend::record_batch). See the
/// [module doc](self).
pub trait Batches: Send + Sync + 'static {
    /// A follower of the batch log.
    type BatchFollower: BatchFollower;

    /// Follow the log from the oldest record the broker keeps.
    fn follow_batches(
        &self,
    ) -> impl Future<Output = Result<Self::BatchFollower, BrokerError>> + Send;
}

/// The batch log as one host reads it.
pub trait BatchFollower: Send + 'static {
    /// The next record, waiting for one; `None` once the backend is closed. Not
    /// cancel-safe: a record taken off the broker when the future is dropped is lost to
    /// this follower, so a caller that races it against anything but its own end reads
    /// on a task of its own.
    fn next(&mut self) -> impl Future<Output = Option<BatchRecord>> + Send;
}

/// A shared backend follows batches as the backend does.
impl<B: Batches> Batches for std::sync::Arc<B> {
    type BatchFollower = B::BatchFollower;

    fn follow_batches(
        &self,
    ) -> impl Future<Output = Result<Self::BatchFollower, BrokerError>> + Send {
        (**self).follow_batches()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(members: usize) -> Opened {
        Opened {
            batch: Uuid::new_v4(),
            members: (0..members).map(|_| Uuid::new_v4()).collect(),
            callbacks: Callbacks {
                on_success: Some("report.Gather".into()),
                ..Callbacks::default()
            },
            context: Some(serde_json::json!({"day": "2026-12-07"})),
            at_ms: 1,
        }
    }

    #[test]
    fn a_record_goes_over_the_wire_and_back_as_it_was() {
        let batch = Uuid::new_v4();
        for record in [
            BatchRecord::Open(opened(3)),
            BatchRecord::End {
                batch,
                job_id: Uuid::new_v4(),
                end: MemberEnd::Dead,
            },
            BatchRecord::Fired {
                batch,
                callback: Callback::OnDeath,
                job_id: Uuid::new_v4(),
            },
            BatchRecord::Mark {
                mark: Uuid::new_v4(),
            },
            BatchRecord::Add {
                batch,
                by: Uuid::new_v4(),
                members: vec![Uuid::new_v4()],
            },
        ] {
            assert_eq!(BatchRecord::decode(&record.encode()), Ok(record));
        }
    }

    #[test]
    fn the_largest_batch_fits_in_one_record() {
        let mut largest = opened(BATCH_MAX);
        largest.context = Some("x".repeat(CONTEXT_MAX_BYTES - 2).into());
        largest.callbacks.on_complete = Some("c".repeat(NAME_MAX));
        let record = BatchRecord::Open(largest);
        assert!(BatchRecord::decode(&record.encode()).is_ok());
    }

    #[test]
    fn what_is_not_a_batch_record_is_refused_with_the_reason() {
        let mut too_many = opened(BATCH_MAX + 1);
        too_many.context = None;
        let mut forged_type = opened(1);
        forged_type.callbacks.on_death = Some("evil\u{1b}[2J".into());
        let mut big_context = opened(1);
        big_context.context = Some("x".repeat(CONTEXT_MAX_BYTES).into());
        let huge = vec![b' '; RECORD_MAX_BYTES + 1];
        for (body, why) in [
            (b"\xff garbage".to_vec(), "expected value"),
            (br#"{"record":"explode"}"#.to_vec(), "unknown variant"),
            (
                br#"{"record":"end","batch":"nope","job_id":"x","end":"completed"}"#.to_vec(),
                "UUID",
            ),
            (BatchRecord::Open(opened(0)).encode(), "1 to"),
            (BatchRecord::Open(too_many).encode(), "1 to"),
            (
                BatchRecord::Open(forged_type).encode(),
                "not a job type name",
            ),
            (BatchRecord::Open(big_context).encode(), "context"),
            (huge, "the limit is"),
        ] {
            let err = BatchRecord::decode(&body)
                .expect_err(&String::from_utf8_lossy(&body[..40.min(body.len())]));
            assert!(err.to_string().contains(why), "{err}");
        }
    }
}
