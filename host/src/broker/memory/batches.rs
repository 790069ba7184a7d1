//! [`Batches`] in memory: the batch log is a [`Log`] of the last [`MEMORY_RECORDS`],
//! replayed to every new follower, as RabbitMQ's stream replays its retention.

use std::sync::Arc;

use super::MemoryBackend;
use super::log::{Log, Reader};
use crate::broker::BrokerError;
use crate::broker::batches::{BatchFollower, BatchRecord, Batches, MEMORY_RECORDS};

/// The batch log of one memory backend.
#[derive(Debug)]
pub(super) struct BatchLog(Arc<Log<BatchRecord>>);

impl Default for BatchLog {
    fn default() -> Self {
        Self(Arc::new(Log::new(MEMORY_RECORDS)))
    }
}

impl BatchLog {
    /// Append `record`, for [`Backend::record_batch`](crate::broker::Backend::record_batch).
    pub(super) fn append(&self, record: &BatchRecord) {
        self.0.append(record.clone());
    }
}

impl Batches for MemoryBackend {
    type BatchFollower = MemoryBatchFollower;

    async fn follow_batches(&self) -> Result<MemoryBatchFollower, BrokerError> {
        Ok(MemoryBatchFollower(Reader::new(Arc::clone(
            &self.batches.0,
        ))))
    }
}

/// A follower of a memory backend's batch log, from the oldest record kept.
#[derive(Debug)]
pub struct MemoryBatchFollower(Reader<BatchRecord>);

impl BatchFollower for MemoryBatchFollower {
    async fn next(&mut self) -> Option<BatchRecord> {
        Some(self.0.next().await)
    }
}
