//! Enqueueing a job by its type name and JSON payload, as the CLI and the demo do.

use std::time::Duration;

use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;

use super::api::{Enqueued, millis};
use crate::broker::{Backend, BrokerError};
use crate::envelope::Envelope;
use crate::policy::Granularity;
use crate::producer::publish_first_attempt;
use crate::trace::TraceContext;

/// Declare `queue` (idempotent) and publish a first attempt of `job_type` with `payload`,
/// after `delay` rounded up to `granularity` when one is given, like a producer would: in
/// the trace of `trace` (its `traceparent` is the new job's parent), or a new trace.
pub async fn enqueue<B: Backend>(
    backend: &B,
    queue: &QueueConfig,
    job_type: &str,
    payload: &serde_json::Value,
    delay: Option<Duration>,
    granularity: Granularity,
    trace: Option<TraceContext>,
) -> Result<Enqueued, BrokerError> {
    let payload: Box<RawValue> = serde_json::value::to_raw_value(payload)
        .expect("a JSON value always serializes: it is JSON already");
    let trace = trace.unwrap_or_else(TraceContext::start);
    let trace_id = trace.parent.trace_id.to_string();
    let envelope = Envelope {
        trace: Some(trace),
        ..Envelope::new(job_type, queue.name.as_str(), payload)
    };
    backend.declare(queue).await?;
    let delay = publish_first_attempt(backend, &envelope, delay, granularity).await?;
    Ok(Enqueued {
        job_id: envelope.job_id,
        queue: queue.name.clone(),
        delay_ms: delay.map(|delay| millis(delay.get())),
        trace_id: Some(trace_id),
    })
}
