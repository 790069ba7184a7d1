//! Enqueueing jobs from native Rust applications, type-checked against their queues.
//!
//! The job structs are the ones the plugin crate derives (`#[derive(Job)]`), shared as a
//! library: `Producer<AppQueues, _>::enqueue` accepts only jobs whose `queue = ...` names a
//! queue of `AppQueues`, so a job cannot be sent to a queue set that does not serve it
//! (the `jobhost-e2e` crate's doc holds the example that must not compile).
//!
//! Every job a producer publishes starts a new trace (a `traceparent` header with a fresh
//! trace id), unless it is enqueued with [`Producer::enqueue_in_trace`], whose context
//! makes the job a child of the caller's span (see [`crate::trace`]).

use std::marker::PhantomData;
use std::time::Duration;

use jobhost_sdk::{Job, Queues};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::broker::{Backend, BrokerError};
use crate::envelope::Envelope;
use crate::policy::{Granularity, HoldDelay};
use crate::trace::TraceContext;

/// Why a job was not enqueued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// The job did not serialize to JSON.
    #[error("job `{job_type}` does not serialize to JSON: {cause}")]
    Serialize {
        /// The job type.
        job_type: &'static str,
        /// serde's message; in the message, so not also a `source()`.
        cause: serde_json::Error,
    },
    /// The broker did not take the job.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Publishes jobs of the queue set `Q` to a backend.
#[derive(Debug, Clone)]
pub struct Producer<Q, B> {
    backend: B,
    granularity: Granularity,
    queues: PhantomData<fn() -> Q>,
}

impl<Q: Queues, B: Backend> Producer<Q, B> {
    /// A producer for `Q` on `backend`; declares every queue of `Q` first.
    pub async fn new(backend: B) -> Result<Self, BrokerError> {
        for queue in Q::all() {
            backend.declare(&queue.config()).await?;
        }
        Ok(Self {
            backend,
            granularity: Granularity::default(),
            queues: PhantomData,
        })
    }

    /// Round delays to `granularity` instead of the default 1 s, like the host's
    /// `--retry-granularity`, so producers and retries share hold queues.
    pub fn with_granularity(self, granularity: Granularity) -> Self {
        Self {
            granularity,
            ..self
        }
    }

    /// Publish `job` now, in a new trace. Returns its job id once the broker confirmed it.
    pub async fn enqueue<J: Job<Queues = Q>>(&self, job: &J) -> Result<Uuid, ProduceError> {
        self.publish(envelope(job)?, None).await
    }

    /// Publish `job` now in the caller's trace: `trace` is the caller's context (its
    /// `traceparent` names the caller's span), so the job's span is a child of it.
    pub async fn enqueue_in_trace<J: Job<Queues = Q>>(
        &self,
        job: &J,
        trace: TraceContext,
    ) -> Result<Uuid, ProduceError> {
        let envelope = Envelope {
            trace: Some(trace),
            ..envelope(job)?
        };
        self.publish(envelope, None).await
    }

    /// Publish `job` to be delivered after `delay`, behind whatever is queued then. A delay
    /// longer than a hold queue can hold ([`MAX_HOLD_DELAY`](crate::broker::MAX_HOLD_DELAY))
    /// is refused with [`BrokerError::DelayTooLong`] and nothing is sent.
    pub async fn enqueue_after<J: Job<Queues = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Uuid, ProduceError> {
        self.publish(envelope(job)?, Some(delay)).await
    }

    /// Publish `job` to be delivered after `delay` at its queue's top priority, ahead of
    /// the backlog, as a handler's deferral would.
    pub async fn defer<J: Job<Queues = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Uuid, ProduceError> {
        let mut envelope = envelope(job)?;
        envelope.priority = J::QUEUE.config().max_priority;
        self.publish(envelope, Some(delay)).await
    }

    async fn publish(
        &self,
        envelope: Envelope,
        delay: Option<Duration>,
    ) -> Result<Uuid, ProduceError> {
        publish_first_attempt(&self.backend, &envelope, delay, self.granularity).await?;
        Ok(envelope.job_id)
    }
}

/// Publish a new job's envelope now, or after `delay` rounded up to `granularity`; a delay
/// longer than a hold queue can hold is refused before anything is sent. The one way jobs
/// enter the broker from outside a handler: typed producers, the admin API, the CLI.
/// Returns the hold delay used.
pub(crate) async fn publish_first_attempt<B: Backend>(
    backend: &B,
    envelope: &Envelope,
    delay: Option<Duration>,
    granularity: Granularity,
) -> Result<Option<HoldDelay>, BrokerError> {
    let delay = delay.map(|delay| granularity.round(delay)).transpose()?;
    backend.publish(envelope, delay).await?;
    Ok(delay)
}

fn envelope<J: Job>(job: &J) -> Result<Envelope, ProduceError> {
    let serialize = |cause| ProduceError::Serialize {
        job_type: J::NAME,
        cause,
    };
    let payload: Box<RawValue> = serde_json::value::to_raw_value(job).map_err(serialize)?;
    Ok(Envelope {
        trace: Some(TraceContext::start()),
        ..Envelope::new(J::NAME, J::QUEUE.name(), payload)
    })
}
