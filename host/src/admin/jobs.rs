//! Enqueueing a job by its type name and JSON payload, as the CLI and the demo do.

use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;

use super::api::{Enqueued, millis};
use crate::broker::{Backend, BrokerError};
use crate::policy::Granularity;
use crate::producer::{EnqueueOptions, publish_first_attempt};

/// Declare `queue` (idempotent) and publish a first attempt of `job_type` with `payload`,
/// like a producer would, as `options` say: after their delay rounded up to `granularity`,
/// with their expiry, unique by their key (a duplicate is refused with
/// [`BrokerError::Duplicate`]), in their trace (its `traceparent` is the new job's parent)
/// or a new trace.
pub async fn enqueue<B: Backend>(
    backend: &B,
    queue: &QueueConfig,
    job_type: &str,
    payload: &serde_json::Value,
    options: EnqueueOptions,
    granularity: Granularity,
) -> Result<Enqueued, BrokerError> {
    let payload: Box<RawValue> = serde_json::value::to_raw_value(payload)
        .expect("a JSON value always serializes: it is JSON already");
    let (envelope, delay) = options.first_attempt(job_type, queue.name.as_str(), payload)?;
    let trace_id = envelope
        .trace
        .as_ref()
        .map(|trace| trace.parent.trace_id.to_string());
    backend.declare(queue).await?;
    let delay = publish_first_attempt(backend, &envelope, delay, granularity).await?;
    Ok(Enqueued {
        job_id: envelope.job_id,
        queue: queue.name.clone(),
        delay_ms: delay.map(|delay| millis(delay.get())),
        expires_at_ms: envelope.expires_at_ms.map(|deadline| deadline.epoch_ms()),
        trace_id,
    })
}
