//! Enqueueing jobs from native Rust applications, type-checked against their queues.
//!
//! The job structs are the ones the plugin crate derives (`#[derive(Job)]`), shared as a
//! library: `Producer<AppQueues, _>::enqueue` accepts only jobs whose `queue = ...` names a
//! queue of `AppQueues`, so a job cannot be sent to a queue set that does not serve it
//! (the `jobhost-e2e` crate's doc holds the example that must not compile).
//!
//! Every job a producer publishes starts a new trace (a `traceparent` header with a fresh
//! trace id), unless it is enqueued with [`Producer::enqueue_in_trace`] or
//! [`EnqueueOptions::trace`], whose context makes the job a child of the caller's span
//! (see [`crate::trace`]).
//!
//! A job enqueued with [`EnqueueOptions::expires_in`] carries a deadline (`expires_at_ms`,
//! read on this machine's clock): delivered at or after it, the job is settled as expired
//! without running and its message goes to the dead-letter queue (see
//! [`crate::job::Expired`]).
//!
//! A job enqueued with [`EnqueueOptions::unique`] takes the lock of its key among the jobs
//! of its type before it is published (see [`crate::broker::UniqueLock`]): while another
//! job holds that key (queued, held for a retry or deferral, or running), the enqueue is
//! refused with [`BrokerError::Duplicate`], which names the holder's id, and nothing is
//! published. The job lets go of the key when it settles for good (completed,
//! dead-lettered, expired), or, at the latest, `for` after it took it.

use std::marker::PhantomData;
use std::time::Duration;

use jobhost_sdk::limits::UniqueKey;
use jobhost_sdk::{Job, Queues};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::broker::{Backend, BrokerError, Taken, UniqueLock};
use crate::envelope::Envelope;
use crate::grants::{CapKey, key_of};
use crate::job::Deadline;
use crate::policy::{Granularity, HoldDelay};
use crate::text::{NAME_MAX, bounded};
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
        self.enqueue_with(job, EnqueueOptions::new()).await
    }

    /// Publish `job` now in the caller's trace: `trace` is the caller's context (its
    /// `traceparent` names the caller's span), so the job's span is a child of it.
    pub async fn enqueue_in_trace<J: Job<Queues = Q>>(
        &self,
        job: &J,
        trace: TraceContext,
    ) -> Result<Uuid, ProduceError> {
        self.enqueue_with(job, EnqueueOptions::new().trace(trace))
            .await
    }

    /// Publish `job` to be delivered after `delay`, behind whatever is queued then. A delay
    /// longer than a hold queue can hold ([`MAX_HOLD_DELAY`](crate::broker::MAX_HOLD_DELAY))
    /// is refused with [`BrokerError::DelayTooLong`] and nothing is sent.
    pub async fn enqueue_after<J: Job<Queues = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Uuid, ProduceError> {
        self.enqueue_with(job, EnqueueOptions::new().delay(delay))
            .await
    }

    /// Publish `job` as `options` say: when it is delivered, when it expires, whether its
    /// key must be unique, in which trace. Returns its job id once the broker confirmed it;
    /// a delay longer than a hold queue can hold is refused as by
    /// [`enqueue_after`](Self::enqueue_after), a duplicate of a unique job with
    /// [`BrokerError::Duplicate`] naming the job that holds the key.
    pub async fn enqueue_with<J: Job<Queues = Q>>(
        &self,
        job: &J,
        options: EnqueueOptions,
    ) -> Result<Uuid, ProduceError> {
        let (envelope, delay) = envelope(job, options)?;
        self.publish(envelope, delay).await
    }

    /// Publish `job` to be delivered after `delay` at its queue's top priority, ahead of
    /// the backlog, as a handler's deferral would.
    pub async fn defer<J: Job<Queues = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Uuid, ProduceError> {
        let (mut envelope, _) = envelope(job, EnqueueOptions::new())?;
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
    publish_new(backend, envelope, delay).await.map(|()| delay)
}

/// Publish a new job's envelope, now or after `delay`: what [`publish_first_attempt`] does
/// once the delay is rounded, and how a handler's follow-ups are published.
///
/// A unique job takes its lock first, and a duplicate is refused before anything is
/// published. When the job's own publish then fails, the lock is let go of again, so a job
/// that was never enqueued does not keep its key for `for` (should the broker have taken
/// the job all the same, its confirm lost, that job runs without its lock).
pub(crate) async fn publish_new<B: Backend>(
    backend: &B,
    envelope: &Envelope,
    delay: Option<HoldDelay>,
) -> Result<(), BrokerError> {
    let lock = envelope.unique_lock.as_deref().and_then(UniqueLock::parse);
    if let Some(lock) = &lock
        && let Taken::HeldBy(existing) = backend.take_unique(lock, envelope.job_id).await?
    {
        return Err(BrokerError::Duplicate {
            job_type: bounded(&envelope.job_type, NAME_MAX).into_owned(),
            existing,
        });
    }
    let published = backend.publish(envelope, delay).await;
    if published.is_err()
        && let Some(lock) = &lock
        && let Err(error) = backend.release_unique(lock, envelope.job_id).await
    {
        tracing::warn!(%error, lock = lock.name(), "a job that was not enqueued keeps its unique key until its `for` ends");
    }
    published
}

/// How a job is enqueued. Built from [`EnqueueOptions::new`], whose defaults are: delivered
/// now, never expires, not unique, in a new trace, with a new random id.
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    delay: Option<Duration>,
    expires_in: Option<Duration>,
    unique: Option<(String, Duration)>,
    trace: Option<TraceContext>,
    job_id: Option<Uuid>,
}

impl EnqueueOptions {
    /// Delivered now, never expires, not unique, in a new trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deliver after `delay`, rounded up to the granularity (at most
    /// [`MAX_HOLD_DELAY`](crate::broker::MAX_HOLD_DELAY)).
    pub fn delay(self, delay: Duration) -> Self {
        Self {
            delay: Some(delay),
            ..self
        }
    }

    /// The job expires `expires_in` after it is enqueued, on this machine's clock:
    /// delivered at or after that, it is settled as expired without running. A delay as
    /// long or longer makes a job that expires when it is delivered; a length past the end
    /// of time never expires.
    pub fn expires_in(self, expires_in: Duration) -> Self {
        Self {
            expires_in: Some(expires_in),
            ..self
        }
    }

    /// The job is unique by `key` among the jobs of its type: while another job with that
    /// key is queued, held or running (for at most `for_` after it was enqueued), the
    /// enqueue is refused with [`BrokerError::Duplicate`]. The key is hashed, never sent; a
    /// key that is empty or longer than [`UNIQUE_KEY_MAX`](crate::broker::UNIQUE_KEY_MAX)
    /// bytes, or a `for_` under 1 ms or over [`UNIQUE_FOR_MAX`](crate::broker::UNIQUE_FOR_MAX),
    /// is refused with [`BrokerError::InvalidUnique`] when the job is enqueued.
    pub fn unique(self, key: impl Into<String>, for_: Duration) -> Self {
        Self {
            unique: Some((key.into(), for_)),
            ..self
        }
    }

    /// Unique as its job type declares (`#[job(unique(key = "field", for = "10m"))]`) for a
    /// job with `payload`: by the value under the declared field, read as a cap reads its
    /// key; a payload without it (or with `null`, an array or an object there) is not
    /// unique. Options that say how the job is unique already ([`Self::unique`]) win.
    pub fn unique_as_declared(self, declared: Option<&UniqueKey>, payload: &RawValue) -> Self {
        let Some(declared) = declared.filter(|_| self.unique.is_none()) else {
            return self;
        };
        match key_of(&declared.key, payload) {
            CapKey::Value(key) => self.unique(key, declared.for_),
            CapKey::Missing => self,
        }
    }

    /// The lock a job of `job_type` enqueued with these options takes, if it is unique; a
    /// unique key or `for` out of range is refused.
    pub(crate) fn unique_lock(&self, job_type: &str) -> Result<Option<UniqueLock>, BrokerError> {
        self.unique
            .as_ref()
            .map(|(key, for_)| UniqueLock::new(job_type, key, *for_))
            .transpose()
    }

    /// Join the caller's trace: `trace`'s `traceparent` is the new job's parent.
    pub fn trace(self, trace: TraceContext) -> Self {
        Self {
            trace: Some(trace),
            ..self
        }
    }

    /// The job's id is `job_id` instead of a new random one: for a job whose id must be the
    /// same whoever enqueues it, such as a schedule's firing of one tick.
    pub fn job_id(self, job_id: Uuid) -> Self {
        Self {
            job_id: Some(job_id),
            ..self
        }
    }

    /// The first attempt of a new job of `job_type` on `queue` with `payload`, enqueued
    /// now: in its trace (a new one by default), with its deadline when it expires and
    /// the name of its lock when it is unique; and the delay to publish it after, not yet
    /// rounded. A unique key or `for` out of range is refused.
    pub(crate) fn first_attempt(
        self,
        job_type: &str,
        queue: impl Into<String>,
        payload: Box<RawValue>,
    ) -> Result<(Envelope, Option<Duration>), BrokerError> {
        let lock = self.unique_lock(job_type)?;
        let fresh = Envelope::new(job_type, queue, payload);
        let envelope = Envelope {
            job_id: self.job_id.unwrap_or(fresh.job_id),
            trace: Some(self.trace.unwrap_or_else(TraceContext::start)),
            expires_at_ms: self.expires_in.map(Deadline::from_now),
            unique_lock: lock.map(|lock| lock.name().to_owned()),
            ..fresh
        };
        Ok((envelope, self.delay))
    }
}

fn envelope<J: Job>(
    job: &J,
    options: EnqueueOptions,
) -> Result<(Envelope, Option<Duration>), ProduceError> {
    let serialize = |cause| ProduceError::Serialize {
        job_type: J::NAME,
        cause,
    };
    let payload: Box<RawValue> = serde_json::value::to_raw_value(job).map_err(serialize)?;
    let options = options.unique_as_declared(J::limits().unique.as_ref(), &payload);
    Ok(options.first_attempt(J::NAME, J::QUEUE.name(), payload)?)
}
