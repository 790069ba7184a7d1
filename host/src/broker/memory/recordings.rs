//! [`Recordings`] in memory: a list of the backend's, in the host's own memory, so kept
//! within tighter bounds than the RabbitMQ queue's (count and bytes; age is not enforced,
//! as nothing outlives the process).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use uuid::Uuid;

use super::MemoryBackend;
use crate::broker::BrokerError;
use crate::broker::recordings::{MEMORY_RECORDINGS_KEPT, MEMORY_RECORDINGS_MAX_BYTES, Recordings};
use crate::job::Recording;

/// The recordings of one memory backend, oldest first, with their size as JSON.
#[derive(Debug, Default)]
pub(super) struct Shelf(Mutex<ShelfState>);

#[derive(Debug, Default)]
struct ShelfState {
    kept: VecDeque<(usize, Recording)>,
    bytes: usize,
}

impl Shelf {
    fn lock(&self) -> MutexGuard<'_, ShelfState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Recordings for MemoryBackend {
    async fn keep_recording(&self, recording: &Recording) -> Result<(), BrokerError> {
        let size = serde_json::to_vec(recording).map_or(0, |json| json.len());
        let mut shelf = self.recordings.lock();
        shelf.kept.push_back((size, recording.clone()));
        shelf.bytes += size;
        while shelf.kept.len() > MEMORY_RECORDINGS_KEPT || shelf.bytes > MEMORY_RECORDINGS_MAX_BYTES
        {
            let Some((size, _)) = shelf.kept.pop_front() else {
                break;
            };
            shelf.bytes -= size;
        }
        Ok(())
    }

    async fn recordings_of(&self, job_ids: &[Uuid]) -> Result<Vec<Recording>, BrokerError> {
        let shelf = self.recordings.lock();
        Ok((shelf.kept.iter())
            .filter(|(_, recording)| job_ids.contains(&recording.job.job_id))
            .map(|(_, recording)| recording.clone())
            .collect())
    }
}
