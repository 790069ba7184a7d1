//! Where jobs wait: the [`Backend`] seam and its two implementations, what an operator
//! does with dead letters on either ([`DeadLetters`]), and what an operator tells the
//! whole fleet through either: pause, resume, cancel ([`Control`]), and what the fleet's
//! schedulers keep there: who leads, each schedule's last firings ([`Schedules`]), the
//! fleet's recorded attempts ([`Recordings`]), and the log of its batches ([`Batches`]).
//!
//! The seam is shaped after RabbitMQ's topology (see docs/architecture.md, "Wire format
//! and topology"): a work queue `q`, its dead-letter queue `q.dead`, and one hold queue
//! `q.deferred.{ttl_ms}` per distinct rounded delay, whose TTL dead-letters messages back
//! onto `q`. The in-process [`MemoryBackend`] keeps the same semantics with timers on
//! tokio's clock, so tests run under a paused clock.
//!
//! Contract every backend keeps:
//! - a publish returns only once the broker has taken responsibility for the message
//!   (publisher confirm); a refused or unroutable publish is an error, never a silent loss;
//! - a [`Delivery`] is settled exactly once, by value: acked, or requeued for redelivery;
//! - retries, deferrals and dead letters are publish-then-ack, composed by the worker, so
//!   a failed publish leaves the original to be redelivered;
//! - a unique lock ([`UniqueLock`]) is held by at most one job at a time, and ends by
//!   itself `for` after it was taken, whatever its holder does;
//! - a concurrency cap's [`Permits`] are shared by every host on the broker: at most
//!   `limit` leases are held at once, and a host's leases end with it;
//! - a rate limit's [`Tokens`] are shared by every host on the broker: one comes every
//!   `interval`, at most `burst` wait, and a token taken is spent.

mod batches;
mod control;
mod dead;
mod hold;
mod memory;
mod permits;
mod rabbitmq;
mod recordings;
mod schedule;
mod tokens;
mod unique;

use std::future::Future;
use std::time::Duration;

use jobhost_sdk::{QueueConfig, QueueType};
use uuid::Uuid;

use crate::envelope::Envelope;
use crate::policy::{DelayTooLong, HoldDelay};
use crate::trace::TraceContext;

pub use crate::job::{Callback, Callbacks, MemberEnd};
pub use batches::{
    BATCH_MAX, BATCHES_RETENTION, BATCHES_STREAM, BadBatchRecord, BatchFollower, BatchRecord,
    Batches, CONTEXT_MAX_BYTES, MEMORY_RECORDS, Opened, RECORD_MAX_BYTES,
};
pub use control::{
    BadOrder, CONTROL_RETENTION, CONTROL_STREAM, Command, Control, Followed, Follower,
    MAX_ORDER_BYTES, MEMORY_ORDERS, Order, paused_marker_name,
};
pub use dead::{
    DeadLetterList, DeadLetterView, DeadLetters, EXCERPT_MAX, HEADER_VALUE_MAX, HEADERS_MAX,
    LISTING_MAX_BYTES, Replayed,
};
pub use hold::{
    HoldQueue, MAX_HOLD_DELAY, SHORT_STRING_MAX, dead_letter_queue_name, queue_name_rule,
};
pub use memory::{
    DeadLetter, HeldMessage, MemoryBackend, MemoryBatchFollower, MemoryConsumer, MemoryDelivery,
    MemoryFollower, MemoryLease,
};
pub use permits::Permits;
pub use rabbitmq::{
    RabbitMqBackend, RabbitMqBatchFollower, RabbitMqConsumer, RabbitMqDelivery, RabbitMqFollower,
    RabbitMqLease, RabbitMqOptions, ReconnectBackoff,
};
pub use recordings::{
    KeptRecording, LOOKUP_MAX_BYTES, MEMORY_RECORDINGS_KEPT, MEMORY_RECORDINGS_MAX_BYTES,
    PENDING_MAX, PENDING_MAX_BYTES, RECORDING_JSON_MAX, RECORDINGS_KEPT, RECORDINGS_MAX_BYTES,
    RECORDINGS_QUEUE, RECORDINGS_TTL, Recordings, recorder,
};
pub use schedule::{
    Ended, FIRING_MAX_BYTES, Firing, HISTORY, LEADER_QUEUE, MEMORY_LEASE, Record, Schedules,
    endings_queue_name, history_queue_name, tick_holder, tick_job_id, tick_lock,
};
pub use tokens::Tokens;
pub use unique::{Taken, UNIQUE_FOR_MAX, UNIQUE_KEY_MAX, UniqueLock};

/// A broker the worker consumes from and publishes to.
pub trait Backend: Send + Sync + 'static {
    /// A stream of deliveries from one work queue.
    type Consumer: Consumer;

    /// One permit of a concurrency cap, held until dropped; it dies with the host, because
    /// the broker takes back what a closed connection held.
    type Lease: Send + Sync + 'static;

    /// Declare the work queue and its dead-letter queue (idempotent). Hold queues are
    /// declared on demand by publishes with a delay.
    fn declare(&self, queue: &QueueConfig) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Publish a job to `envelope.queue`, or, with a delay, to the hold queue for that delay,
    /// with [`Envelope::trace`] in its headers. Returns once confirmed.
    fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Publish a dead letter to `{queue}.dead`. Returns once confirmed.
    fn dead_letter(
        &self,
        letter: DeadLetterOut<'_>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Start consuming the work queue with its prefetch.
    fn consume(
        &self,
        queue: &QueueConfig,
    ) -> impl Future<Output = Result<Self::Consumer, BrokerError>> + Send;

    /// Take `lock` for `job_id`, for [`UniqueLock::lasts`] at most (see [`UniqueLock`] for
    /// the contract). A backend that keeps no locks refuses.
    fn take_unique(
        &self,
        lock: &UniqueLock,
        job_id: Uuid,
    ) -> impl Future<Output = Result<Taken, BrokerError>> + Send {
        let _ = job_id;
        let refused = BrokerError::Refused {
            queue: lock.name().to_owned(),
            reason: "this backend keeps no unique locks".to_owned(),
        };
        std::future::ready(Err(refused))
    }

    /// Let go of `lock` if `job_id` holds it; a lock held by another job, or by none, is
    /// left as it is.
    fn release_unique(
        &self,
        lock: &UniqueLock,
        job_id: Uuid,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        let _ = (lock, job_id);
        std::future::ready(Ok(()))
    }

    /// Append `record` to the fleet's batch log (see [`Batches`]). Returns once the broker
    /// has it. A backend that keeps no batch log refuses.
    fn record_batch(
        &self,
        record: &BatchRecord,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        let _ = record;
        let refused = BrokerError::Refused {
            queue: BATCHES_STREAM.to_owned(),
            reason: "this backend keeps no batches".to_owned(),
        };
        std::future::ready(Err(refused))
    }

    /// Take one of `permits` without waiting: `None` when all of them are held, fleet-wide
    /// (see docs/flow-control.md for what holds across host kills and broker restarts).
    fn take_permit(
        &self,
        permits: &Permits,
    ) -> impl Future<Output = Result<Option<Self::Lease>, BrokerError>> + Send;

    /// Take one of `tokens` without waiting: `false` when none is due yet, fleet-wide. A
    /// token taken is spent, whatever becomes of the job (see docs/flow-control.md).
    fn take_token(&self, tokens: &Tokens)
    -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// Give out no token of `tokens` for `delay` from now, fleet-wide, and none of those
    /// saved up before: a called service said to come back then (`Retry-After`). After
    /// `delay` the tokens come at the rate again, from none saved up (see
    /// docs/flow-control.md, "Retry-After").
    fn hold_tokens(
        &self,
        tokens: &Tokens,
        delay: Duration,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// How long a queue's jobs may keep a thread busy, on average, and still start inside
    /// its consume loop instead of a task of their own; `None` gives every job a task.
    /// It pays where one thread runs such jobs faster than a consumer receives them, so a
    /// task would only add the wake of another thread (see `worker::inline`).
    fn inline_limit(&self) -> Option<Duration>;
}

/// A consumer of one work queue.
pub trait Consumer: Send + 'static {
    /// A message taken from the queue.
    type Delivery: Delivery;

    /// The next delivery, waiting for one; `None` once the consumer is closed. Never more
    /// than the queue's prefetch are delivered and unsettled at once.
    fn next(&mut self) -> impl Future<Output = Option<Self::Delivery>> + Send;

    /// Stop delivering; deliveries already handed out stay valid and must still be settled.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// A message taken from a work queue, settled exactly once.
pub trait Delivery: Send + Sync + 'static {
    /// The raw message body.
    fn body(&self) -> &[u8];

    /// Whether the broker delivered this message before (after a crash or a requeue).
    fn redelivered(&self) -> bool;

    /// The message's trace context: its `traceparent` header when that is a valid W3C
    /// value, with its `tracestate` when bounded; `None` for no header or an invalid one.
    fn trace_context(&self) -> Option<TraceContext>;

    /// Done with it: the broker forgets the message.
    fn ack(self) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Give it back for redelivery, e.g. when a publish that should replace it failed.
    fn requeue(self) -> impl Future<Output = Result<(), BrokerError>> + Send;
}

/// A message for `{queue}.dead`: the original body, byte for byte, and why.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterOut<'a> {
    /// The work queue the message came from (`x-original-queue`).
    pub queue: &'a str,
    /// The body as it was delivered, even if it is not an envelope.
    pub body: &'a [u8],
    /// Why the job was dead-lettered (`x-death-reason`).
    pub reason: &'a str,
    /// The attempt that was last tried, 0 when the body was not an envelope (`x-attempts`).
    pub attempts: u32,
    /// The trace the message belonged to (`traceparent`, `tracestate`), so a dead letter
    /// can be found by its trace id.
    pub trace: Option<&'a TraceContext>,
}

/// How many messages wait around one work queue, as the broker counts them: what an
/// operator looks at to see whether a queue keeps up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepth {
    /// Ready on the work queue, not yet delivered.
    pub ready: u64,
    /// In its dead-letter queue.
    pub dead: u64,
    /// In its hold queues: retries and deferrals waiting out their delay.
    pub held: u64,
}

/// Why the broker did not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The delay is longer than a hold queue can hold.
    #[error("delay of {delay:?} is longer than a hold queue can hold (at most {MAX_HOLD_DELAY:?})")]
    DelayTooLong {
        /// The delay asked for.
        delay: Duration,
    },
    /// The queue name breaks [`queue_name_rule`].
    #[error("queue name `{name}` is invalid: {reason}")]
    InvalidQueueName {
        /// The queue name, bounded.
        name: String,
        /// Which part of the rule it breaks.
        reason: String,
    },
    /// The queue was never declared.
    #[error("queue `{0}` is not declared")]
    UnknownQueue(String),
    /// The broker refused the publish (nack), e.g. under memory pressure.
    #[error("publish to `{queue}` was not confirmed: {reason}")]
    NotConfirmed {
        /// Where the message was going.
        queue: String,
        /// What the broker said.
        reason: String,
    },
    /// The broker returned the publish as unroutable: no queue of that name exists.
    #[error("publish to `{queue}` was returned as unroutable: {reason}")]
    Unroutable {
        /// Where the message was going.
        queue: String,
        /// What the broker said.
        reason: String,
    },
    /// The broker refused an operation on a queue, e.g. a declaration whose arguments
    /// differ from those of the existing queue.
    #[error("broker refused `{queue}`: {reason}")]
    Refused {
        /// The queue.
        queue: String,
        /// What the broker said.
        reason: String,
    },
    /// The queue exists on the broker as another queue type than the one declared: a
    /// queue's type is fixed when it is created.
    #[error(
        "queue `{queue}` exists on the broker as another type than the {wanted} queue the \
         plugin declares ({reason}); either keep the queue's type in the plugin \
         (`queue_type = \"{}\"`), or drain `{queue}` and its dead letters and delete both \
         (`rabbitmqctl delete_queue {queue}`), so the host declares them again as {wanted} queues",
        wanted.other()
    )]
    QueueTypeConflict {
        /// The queue.
        queue: String,
        /// The type the plugin declares.
        wanted: QueueType,
        /// What the broker said.
        reason: String,
    },
    /// The unique key or its `for` is out of range (see [`UniqueLock::new`]).
    #[error("invalid unique key: {reason}")]
    InvalidUnique {
        /// What is wrong with it.
        reason: String,
    },
    /// A job with the same unique key is queued, held or running: the enqueue is refused.
    #[error(
        "a `{job_type}` job with this unique key is already queued, held or running: {}",
        existing.map_or_else(|| "its id could not be read".to_owned(), |id| format!("job {id}"))
    )]
    Duplicate {
        /// The job type, bounded.
        job_type: String,
        /// The id of the job that holds the key, when the broker could tell it.
        existing: Option<Uuid>,
    },
    /// The connection or channel failed.
    #[error("broker connection: {0}")]
    Connection(String),
    /// The backend is shutting down.
    #[error("backend is closed")]
    Closed,
}

impl From<DelayTooLong> for BrokerError {
    fn from(error: DelayTooLong) -> Self {
        Self::DelayTooLong { delay: error.delay }
    }
}

impl BrokerError {
    /// Whether trying the same operation again can never succeed: the delay, the name or
    /// the queue is wrong, or the broker refused or returned it for what it is. A permanent
    /// failure dead-letters the delivery it settles; any other failure (a lost connection,
    /// a nack, shutdown) leaves it for redelivery after a pause.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::DelayTooLong { .. }
            | Self::InvalidQueueName { .. }
            | Self::UnknownQueue(_)
            | Self::Unroutable { .. }
            | Self::Refused { .. }
            | Self::QueueTypeConflict { .. }
            | Self::InvalidUnique { .. }
            | Self::Duplicate { .. } => true,
            Self::NotConfirmed { .. } | Self::Connection(_) | Self::Closed => false,
        }
    }
}

/// A shared backend, so a worker and a producer can publish through one connection.
impl<B: Backend> Backend for std::sync::Arc<B> {
    type Consumer = B::Consumer;
    type Lease = B::Lease;

    fn declare(&self, queue: &QueueConfig) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).declare(queue)
    }

    fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).publish(envelope, delay)
    }

    fn dead_letter(
        &self,
        letter: DeadLetterOut<'_>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).dead_letter(letter)
    }

    fn consume(
        &self,
        queue: &QueueConfig,
    ) -> impl Future<Output = Result<Self::Consumer, BrokerError>> + Send {
        (**self).consume(queue)
    }

    fn take_unique(
        &self,
        lock: &UniqueLock,
        job_id: Uuid,
    ) -> impl Future<Output = Result<Taken, BrokerError>> + Send {
        (**self).take_unique(lock, job_id)
    }

    fn release_unique(
        &self,
        lock: &UniqueLock,
        job_id: Uuid,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).release_unique(lock, job_id)
    }

    fn record_batch(
        &self,
        record: &BatchRecord,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).record_batch(record)
    }

    fn take_permit(
        &self,
        permits: &Permits,
    ) -> impl Future<Output = Result<Option<Self::Lease>, BrokerError>> + Send {
        (**self).take_permit(permits)
    }

    fn take_token(
        &self,
        tokens: &Tokens,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        (**self).take_token(tokens)
    }

    fn hold_tokens(
        &self,
        tokens: &Tokens,
        delay: Duration,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).hold_tokens(tokens, delay)
    }

    fn inline_limit(&self) -> Option<Duration> {
        (**self).inline_limit()
    }
}
