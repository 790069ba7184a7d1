//! Opening a batch: its opening appended to the log, then its members published, each
//! carrying the batch's id.
//!
//! # Contract
//! - Every member's and callback's job type is one a loaded plugin serves, and the
//!   opening is within [`BatchRecord::check`]'s bounds, or nothing is published.
//! - The opening is appended before any member is published, so every host reads it
//!   before any member's ending.
//! - A member that cannot be published is recorded as dead, so the batch still ends (its
//!   `on_death` and `on_complete` fire, never its `on_success`), and the error says how
//!   many were published. (One whose confirm was lost but which the broker took runs
//!   all the same; its completion then counts, as a replayed member's does.)
//! - Members take no unique lock: a batch's members are its own.

use futures_util::{StreamExt, stream};
use jobhost_sdk::QueueConfig;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::broker::{Backend, BatchRecord, BrokerError, Callbacks, MemberEnd, Opened};
use crate::envelope::Envelope;
use crate::job::now_ms;
use crate::producer::EnqueueOptions;
use crate::text::{NAME_MAX, bounded};
use crate::worker::Registry;

/// How many members are published at once.
const PUBLISHING: usize = 64;

/// What `POST /batches` and `jobhost enqueue --batch` ask for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchRequest {
    /// The members, in the order they are published.
    pub jobs: Vec<BatchJob>,
    /// The callbacks.
    #[serde(flatten)]
    pub callbacks: Callbacks,
    /// The JSON each callback's payload carries as `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
}

/// One member of a [`BatchRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchJob {
    /// Its job type.
    pub job_type: String,
    /// Its payload.
    pub payload: serde_json::Value,
}

/// What opening a batch did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOpened {
    /// The batch.
    pub batch_id: Uuid,
    /// Its members' job ids, in the request's order.
    pub job_ids: Vec<Uuid>,
}

/// Why a batch was not opened, or not whole.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No loaded plugin serves a job type it names.
    #[error("no loaded plugin serves `{0}`")]
    NoHandler(String),
    /// It is out of bounds.
    #[error("{0}")]
    Invalid(String),
    /// The broker did not take its opening: nothing was published.
    #[error("the batch was not opened: {0}")]
    NotOpened(BrokerError),
    /// Some members were not published; they count as dead.
    #[error(
        "batch {batch_id} opened, but only {published} of its {total} jobs were published: \
         the rest count as dead, so its on_success never fires ({error})"
    )]
    Partial {
        /// The batch.
        batch_id: Uuid,
        /// Members published.
        published: usize,
        /// Members asked for.
        total: usize,
        /// The first publish that failed.
        error: BrokerError,
    },
}

/// Open `request` as a batch on `backend`, its job types routed by `registry`.
pub async fn open<B: Backend>(
    backend: &B,
    registry: &Registry,
    request: BatchRequest,
) -> Result<BatchOpened, OpenError> {
    for (_, job_type) in request.callbacks.each() {
        registry
            .route(job_type)
            .ok_or_else(|| OpenError::NoHandler(bounded(job_type, NAME_MAX).into_owned()))?;
    }
    let batch = Uuid::new_v4();
    let mut members = Vec::with_capacity(request.jobs.len());
    for job in request.jobs {
        let route = registry
            .route(&job.job_type)
            .ok_or_else(|| OpenError::NoHandler(bounded(&job.job_type, NAME_MAX).into_owned()))?;
        let payload: Box<RawValue> = serde_json::value::to_raw_value(&job.payload)
            .expect("a JSON value always serializes: it is JSON already");
        let (mut envelope, _) = EnqueueOptions::new()
            .first_attempt(&job.job_type, route.queue.name.as_str(), payload)
            .map_err(|error| OpenError::Invalid(error.to_string()))?;
        envelope.batch = Some(batch);
        members.push((envelope, route.queue.clone()));
    }
    let opening = BatchRecord::Open(Opened {
        batch,
        members: members
            .iter()
            .map(|(envelope, _)| envelope.job_id)
            .collect(),
        callbacks: request.callbacks,
        context: request.context,
        at_ms: now_ms(),
    });
    opening
        .check()
        .map_err(|bad| OpenError::Invalid(bad.to_string()))?;
    backend
        .record_batch(&opening)
        .await
        .map_err(OpenError::NotOpened)?;
    let total = members.len();
    let job_ids = members
        .iter()
        .map(|(envelope, _)| envelope.job_id)
        .collect();
    let mut queues: Vec<&QueueConfig> = members.iter().map(|(_, queue)| queue).collect();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    queues.dedup_by(|a, b| a.name == b.name);
    for queue in queues {
        if let Err(error) = backend.declare(queue).await {
            count_as_dead(backend, batch, members.iter().map(|(envelope, _)| envelope)).await;
            return Err(OpenError::Partial {
                batch_id: batch,
                published: 0,
                total,
                error,
            });
        }
    }
    // Many at once, so their confirms come back together rather than one round trip each.
    let publishes: Vec<_> = members
        .iter()
        .map(|(envelope, _)| async move { (envelope, backend.publish(envelope, None).await) })
        .collect();
    let sent: Vec<(&Envelope, Result<(), BrokerError>)> = stream::iter(publishes)
        .buffer_unordered(PUBLISHING)
        .collect()
        .await;
    let mut failed = Vec::new();
    let mut first_error = None;
    for (envelope, result) in sent {
        if let Err(error) = result {
            failed.push(envelope);
            first_error.get_or_insert(error);
        }
    }
    if let Some(error) = first_error {
        count_as_dead(backend, batch, failed.iter().copied()).await;
        return Err(OpenError::Partial {
            batch_id: batch,
            published: total - failed.len(),
            total,
            error,
        });
    }
    Ok(BatchOpened {
        batch_id: batch,
        job_ids,
    })
}

/// BatchRecord `unpublished` members as dead, as far as the broker takes it.
async fn count_as_dead<'a, B: Backend>(
    backend: &B,
    batch: Uuid,
    unpublished: impl Iterator<Item = &'a Envelope>,
) {
    for envelope in unpublished {
        let end = BatchRecord::End {
            batch,
            job_id: envelope.job_id,
            end: MemberEnd::Dead,
        };
        if let Err(error) = backend.record_batch(&end).await {
            tracing::warn!(%batch, %error, "an unpublished member was not recorded as dead: the batch never ends");
            return;
        }
    }
}
