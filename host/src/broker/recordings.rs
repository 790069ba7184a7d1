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
//!   [`RECORDING_MAX_BYTES`](crate::job::recording::RECORDING_MAX_BYTES) of answers, so one
//!   message stays small.
//! - Keeping a recording never holds up the attempt's settlement: the [`Recorder`] queues
//!   it for a task that publishes it, and drops it (with a warning) when
//!   [`PENDING_MAX`] already wait, as a broker that is down would make them.
//! - Looking a job up reads the queue's messages unacked and hands them all back by
//!   closing its channel, so a lookup removes nothing; it copies only the job's own.

use std::future::Future;
use std::sync::Arc;
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

/// Recordings waiting to be published at most; more are dropped. Each is at most about a
/// MiB, so a broker outage during a burst of failures holds at most this many MiB.
pub const PENDING_MAX: usize = 32;

/// A fleet's recordings.
pub trait Recordings: Send + Sync + 'static {
    /// Keep `recording` where every host of the fleet can read it.
    fn keep_recording(
        &self,
        recording: &Recording,
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
        recording: &Recording,
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

/// A [`Recorder`] that keeps recordings in `store` from a task of its own.
pub fn recorder<R: Recordings>(store: R) -> Arc<dyn Recorder> {
    let (sender, mut pending) = tokio::sync::mpsc::channel::<Recording>(PENDING_MAX);
    tokio::spawn(async move {
        while let Some(recording) = pending.recv().await {
            if let Err(error) = store.keep_recording(&recording).await {
                tracing::warn!(
                    job_id = %recording.job.job_id,
                    attempt = recording.job.attempt,
                    %error,
                    "the attempt's recording is not kept"
                );
            }
        }
    });
    Arc::new(Keeper { sender })
}

#[derive(Debug)]
struct Keeper {
    sender: tokio::sync::mpsc::Sender<Recording>,
}

impl Recorder for Keeper {
    fn keep(&self, recording: Recording) {
        if let Err(full) = self.sender.try_send(recording) {
            let recording = full.into_inner();
            tracing::warn!(
                job_id = %recording.job.job_id,
                attempt = recording.job.attempt,
                pending = PENDING_MAX,
                "the attempt's recording is dropped: too many wait to be kept"
            );
        }
    }
}
