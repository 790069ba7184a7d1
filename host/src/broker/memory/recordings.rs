//! [`Recordings`] in memory: a list of the backend's, in the host's own memory, so kept
//! within tighter bounds than the RabbitMQ queue's (count and bytes; age is not enforced,
//! as nothing outlives the process).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use uuid::Uuid;

use super::MemoryBackend;
use crate::broker::BrokerError;
use crate::broker::recordings::{
    KeptRecording, Lookup, MEMORY_RECORDINGS_KEPT, MEMORY_RECORDINGS_MAX_BYTES, Recordings,
};
use crate::job::Recording;

/// The recordings of one memory backend, oldest first, as JSON.
#[derive(Debug, Default)]
pub(super) struct Shelf(Mutex<ShelfState>);

#[derive(Debug, Default)]
struct ShelfState {
    kept: VecDeque<KeptRecording>,
    bytes: usize,
}

impl Shelf {
    fn lock(&self) -> MutexGuard<'_, ShelfState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Recordings for MemoryBackend {
    async fn keep_recording(&self, recording: &KeptRecording) -> Result<(), BrokerError> {
        let mut shelf = self.recordings.lock();
        shelf.bytes += recording.json.len();
        shelf.kept.push_back(recording.clone());
        while shelf.kept.len() > MEMORY_RECORDINGS_KEPT || shelf.bytes > MEMORY_RECORDINGS_MAX_BYTES
        {
            let Some(oldest) = shelf.kept.pop_front() else {
                break;
            };
            shelf.bytes -= oldest.json.len();
        }
        Ok(())
    }

    async fn recordings_of(&self, job_ids: &[Uuid]) -> Result<Vec<Recording>, BrokerError> {
        // Copied out first, so keeping a recording never waits for a lookup's decoding.
        let asked: Vec<KeptRecording> = (self.recordings.lock().kept.iter())
            .filter(|kept| job_ids.contains(&kept.job_id))
            .cloned()
            .collect();
        let mut lookup = Lookup::new(job_ids);
        for kept in &asked {
            lookup.offer(&kept.json);
        }
        Ok(lookup.finish())
    }
}
