//! Where recorded attempts are kept for `jobhost replay` ([`Recordings`]), on either
//! backend, and the worker's [`Recorder`] that hands them over (docs/replay.md).
//!
//! # Contract
//! - Every host of a fleet keeps its recordings in one place the others can read: on
//!   RabbitMQ the durable queue [`RECORDINGS_QUEUE`], one persistent message per
//!   recording, its `message-id` the job's id; in memory a list of the backend's.
//! - Retention is the broker's: at most [`RECORDINGS_KEPT`] recordings,
//!   [`RECORDINGS_MAX_BYTES`] in all, each kept [`RECORDINGS_TTL`]; past any of these the
//!   oldest go first. In memory, where they take the host's own memory, at most
//!   [`MEMORY_RECORDINGS_KEPT`] and [`MEMORY_RECORDINGS_MAX_BYTES`]. A recording is at most
//!   [`RECORDING_MAX_BYTES`](crate::job::recording::RECORDING_MAX_BYTES) of answers, and
//!   one whose JSON (its job's payload included) passes [`RECORDING_JSON_MAX`] is not kept.
//! - Keeping a recording never holds up the attempt's settlement: the [`Recorder`] queues
//!   its JSON for a task that publishes it, and drops it (with a warning) when
//!   [`PENDING_MAX`] recordings or [`PENDING_MAX_BYTES`] already wait, as a broker that is
//!   down would make them.
//! - Looking a job up reads the queue's messages unacked and hands them all back by
//!   closing its channel, so a lookup removes nothing. Anyone who may publish to the queue
//!   can put anything there under a job's id, so a lookup is bounded whatever it finds: it
//!   decodes only the asked jobs' messages, skips one larger than [`RECORDING_JSON_MAX`]
//!   (no host wrote it), and answers at most [`LOOKUP_MAX_BYTES`] of recordings, the
//!   newest, leaving the oldest off with a warning.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use uuid::Uuid;

use super::BrokerError;
use crate::job::{Recorder, Recording};

/// The queue of a fleet's recordings on RabbitMQ.
pub const RECORDINGS_QUEUE: &str = "jobhost.recordings";

/// Recordings kept at most; the oldest go first.
pub const RECORDINGS_KEPT: usize = 10_000;

/// Bytes of recordings kept at most (as JSON); the oldest go first.
pub const RECORDINGS_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Recordings the memory backend keeps at most, in the host's own memory; the oldest go
/// first.
pub const MEMORY_RECORDINGS_KEPT: usize = 1_000;

/// Bytes of recordings the memory backend keeps at most (as JSON).
pub const MEMORY_RECORDINGS_MAX_BYTES: usize = 32 * 1024 * 1024;

/// How long a recording is kept.
pub const RECORDINGS_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Recordings waiting to be published at most; more are dropped.
pub const PENDING_MAX: usize = 32;

/// Bytes of recordings (as JSON) waiting to be published at most; more are dropped, so a
/// broker outage during a burst of failures of large jobs holds at most this much.
pub const PENDING_MAX_BYTES: usize = 32 * 1024 * 1024;

/// The largest recording kept, as JSON. Its answers stop at a MiB, so what passes this is
/// a job whose payload alone is several MiB: not kept, with a warning. A lookup skips a
/// message larger than this, which no host wrote.
pub const RECORDING_JSON_MAX: usize = 4 * 1024 * 1024;

/// Bytes of recordings (as JSON) one lookup answers at most: a job retried many times, or
/// sixteen asked at once, answer their newest recordings up to this, the oldest left off.
pub const LOOKUP_MAX_BYTES: usize = 32 * 1024 * 1024;

/// A fleet's recordings.
pub trait Recordings: Send + Sync + 'static {
    /// Keep `recording` where every host of the fleet can read it.
    fn keep_recording(
        &self,
        recording: &KeptRecording,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// The recordings of the attempts of `job_ids` that are still kept, oldest first, in
    /// one pass over what is kept.
    fn recordings_of(
        &self,
        job_ids: &[Uuid],
    ) -> impl Future<Output = Result<Vec<Recording>, BrokerError>> + Send;
}

impl<R: Recordings> Recordings for Arc<R> {
    fn keep_recording(
        &self,
        recording: &KeptRecording,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        R::keep_recording(self, recording)
    }

    fn recordings_of(
        &self,
        job_ids: &[Uuid],
    ) -> impl Future<Output = Result<Vec<Recording>, BrokerError>> + Send {
        R::recordings_of(self, job_ids)
    }
}

/// A recording as it is kept: its JSON, at most [`RECORDING_JSON_MAX`] bytes, and the
/// attempt it is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptRecording {
    /// The job's id (a message's `message-id` on RabbitMQ).
    pub job_id: Uuid,
    /// The attempt's number, for warnings.
    pub attempt: u32,
    /// The recording as JSON.
    pub json: Vec<u8>,
}

impl KeptRecording {
    /// `recording` as JSON, or the size its JSON would have when that passes
    /// [`RECORDING_JSON_MAX`].
    pub fn of(recording: &Recording) -> Result<Self, usize> {
        // A recording is plain data: serialising it cannot fail.
        let json = serde_json::to_vec(recording).unwrap_or_default();
        if json.len() > RECORDING_JSON_MAX {
            return Err(json.len());
        }
        Ok(Self {
            job_id: recording.job.job_id,
            attempt: recording.job.attempt,
            json,
        })
    }
}

/// What one lookup found, oldest first, bounded whatever it is given: only recordings of
/// the asked jobs, none larger than [`RECORDING_JSON_MAX`], at most [`LOOKUP_MAX_BYTES`] in
/// all (the oldest dropped first). Both backends fill one.
#[derive(Debug)]
pub(crate) struct Lookup<'a> {
    job_ids: &'a [Uuid],
    found: VecDeque<(usize, Recording)>,
    bytes: usize,
    left_off: usize,
}

impl<'a> Lookup<'a> {
    pub(crate) fn new(job_ids: &'a [Uuid]) -> Self {
        Self {
            job_ids,
            found: VecDeque::new(),
            bytes: 0,
            left_off: 0,
        }
    }

    /// Whether a message kept under `message_id` may be one of the asked recordings.
    pub(crate) fn asks_for(&self, message_id: &str) -> bool {
        Uuid::parse_str(message_id).is_ok_and(|id| self.job_ids.contains(&id))
    }

    /// Take `json`, found under one of the asked jobs' ids, if it is a recording of one of
    /// them; skip it, with a warning, if it is not or is too large to be one.
    pub(crate) fn offer(&mut self, json: &[u8]) {
        let recording = if json.len() > RECORDING_JSON_MAX {
            None
        } else {
            serde_json::from_slice::<Recording>(json)
                .ok()
                .filter(|recording| self.job_ids.contains(&recording.job.job_id))
        };
        let Some(recording) = recording else {
            tracing::warn!(
                queue = RECORDINGS_QUEUE,
                bytes = json.len(),
                "skipping a message that is not a recording"
            );
            return;
        };
        self.found.push_back((json.len(), recording));
        self.bytes += json.len();
        while self.bytes > LOOKUP_MAX_BYTES {
            let Some((size, _)) = self.found.pop_front() else {
                break;
            };
            self.bytes -= size;
            self.left_off += 1;
        }
    }

    /// The recordings found, oldest first.
    pub(crate) fn finish(self) -> Vec<Recording> {
        if self.left_off > 0 {
            tracing::warn!(
                left_off = self.left_off,
                answered_bytes = self.bytes,
                "a recordings lookup answers the newest {LOOKUP_MAX_BYTES} bytes of recordings \
                 and leaves the oldest off"
            );
        }
        self.found
            .into_iter()
            .map(|(_, recording)| recording)
            .collect()
    }
}

/// A [`Recorder`] that keeps recordings in `store` from a task of its own.
pub fn recorder<R: Recordings>(store: R) -> Arc<dyn Recorder> {
    let (sender, mut pending) = tokio::sync::mpsc::channel::<KeptRecording>(PENDING_MAX);
    let pending_bytes = Arc::new(AtomicUsize::new(0));
    let published = Arc::clone(&pending_bytes);
    tokio::spawn(async move {
        while let Some(recording) = pending.recv().await {
            let kept = store.keep_recording(&recording).await;
            published.fetch_sub(recording.json.len(), Ordering::Relaxed);
            if let Err(error) = kept {
                tracing::warn!(
                    job_id = %recording.job_id,
                    attempt = recording.attempt,
                    %error,
                    "the attempt's recording is not kept"
                );
            }
        }
    });
    Arc::new(Keeper {
        sender,
        pending_bytes,
    })
}

#[derive(Debug)]
struct Keeper {
    sender: tokio::sync::mpsc::Sender<KeptRecording>,
    /// Bytes of the recordings in `sender`'s channel and being published.
    pending_bytes: Arc<AtomicUsize>,
}

impl Recorder for Keeper {
    fn keep(&self, recording: Recording) {
        let (job_id, attempt) = (recording.job.job_id, recording.job.attempt);
        let kept = match KeptRecording::of(&recording) {
            Ok(kept) => kept,
            Err(bytes) => {
                tracing::warn!(
                    %job_id,
                    attempt,
                    bytes,
                    max = RECORDING_JSON_MAX,
                    "the attempt's recording is not kept: too large (the job's payload is {} \
                     bytes)",
                    recording.job.payload.len()
                );
                return;
            }
        };
        let size = kept.json.len();
        let waiting = self.pending_bytes.fetch_add(size, Ordering::Relaxed);
        let refused = if waiting + size > PENDING_MAX_BYTES {
            Err(kept)
        } else {
            self.sender.try_send(kept).map_err(|full| full.into_inner())
        };
        if refused.is_err() {
            self.pending_bytes.fetch_sub(size, Ordering::Relaxed);
            tracing::warn!(
                %job_id,
                attempt,
                pending = PENDING_MAX,
                pending_bytes = PENDING_MAX_BYTES,
                "the attempt's recording is dropped: too many wait to be kept"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(job_id: Uuid, attempt: u32, payload_bytes: usize) -> Recording {
        serde_json::from_value(serde_json::json!({
            "format": 1,
            "job": {
                "job_id": job_id, "job_type": "t.T", "queue": "q", "attempt": attempt,
                "max_attempts": 99, "deferrals": 0, "priority": 0, "age_ms": 0,
                "timeout_ms": 1000, "payload": "x".repeat(payload_bytes)
            },
            "plugin": {"name": "p", "sha256": "00"},
            "recorded_at_ms": 0,
            "outcome": {"kind": "fatal", "reason": "no"},
            "seeds": {"secure": "", "insecure": "", "insecure_seed": ""},
            "imports": [],
            "log": []
        }))
        .expect("a recording")
    }

    fn json(recording: &Recording) -> Vec<u8> {
        serde_json::to_vec(recording).expect("JSON")
    }

    #[test]
    fn a_recording_whose_json_passes_the_bound_is_not_kept_and_says_its_size() {
        let job = Uuid::new_v4();
        let kept = KeptRecording::of(&recording(job, 1, 1000)).expect("a small one is kept");
        assert_eq!((kept.job_id, kept.attempt), (job, 1));
        let too_large = KeptRecording::of(&recording(job, 1, RECORDING_JSON_MAX));
        assert!(too_large.is_err_and(|bytes| bytes > RECORDING_JSON_MAX));
    }

    #[test]
    fn a_lookup_keeps_the_asked_jobs_recordings_only_and_skips_what_no_host_wrote() {
        let (asked, other) = (Uuid::new_v4(), Uuid::new_v4());
        let mut lookup = Lookup::new(std::slice::from_ref(&asked));
        assert!(lookup.asks_for(&asked.to_string()) && !lookup.asks_for(&other.to_string()));
        assert!(!lookup.asks_for("not an id"));
        lookup.offer(b"\xff not json");
        lookup.offer(&json(&recording(other, 1, 10)));
        lookup.offer(&json(&recording(asked, 1, RECORDING_JSON_MAX + 1)));
        lookup.offer(&json(&recording(asked, 2, 10)));
        let found = lookup.finish();
        assert_eq!(found, [recording(asked, 2, 10)]);
    }

    #[test]
    fn a_lookup_answers_the_newest_recordings_up_to_its_bound() {
        let job = Uuid::new_v4();
        let mut lookup = Lookup::new(std::slice::from_ref(&job));
        let attempts = u32::try_from(LOOKUP_MAX_BYTES / (RECORDING_JSON_MAX / 2)).expect("few");
        for attempt in 1..=attempts + 2 {
            lookup.offer(&json(&recording(job, attempt, RECORDING_JSON_MAX / 2)));
        }
        let found = lookup.finish();
        let kept: Vec<u32> = found.iter().map(|r| r.job.attempt).collect();
        // Each is a little over half of RECORDING_JSON_MAX, so one fewer than the bound
        // divided by that fits; the oldest are the ones left off.
        assert_eq!(kept, (4..=attempts + 2).collect::<Vec<_>>());
    }
}
