//! The traits `#[derive(Queues)]` and `#[derive(Job)]` implement, and a queue's settings.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::RetryPolicy;
use crate::limits::{JobLimits, QueueLimits};

/// A plugin's set of queues, usually an enum with `#[derive(Queues)]`.
pub trait Queues: Copy + Eq + Hash + Debug + Send + Sync + 'static {
    /// Every queue of the set, in declaration order.
    fn all() -> &'static [Self];
    /// The broker name of this queue (prefix included).
    fn name(&self) -> &'static str;
    /// This queue's settings.
    fn config(&self) -> QueueConfig;
    /// This queue's fleet-wide limits (`#[queue(concurrency = .., rate = "..", burst = ..)]`),
    /// which the operator's grants file may override; none by default.
    fn limits(&self) -> QueueLimits {
        QueueLimits::default()
    }
}

/// A job type, usually a struct with `#[derive(Job)]`; its value is the payload.
pub trait Job: Serialize + DeserializeOwned {
    /// The job type name carried in every envelope (default: `module_path::TypeName`).
    const NAME: &'static str;
    /// The queue set this job's queue belongs to.
    type Queues: Queues;
    /// The queue this job is published to.
    const QUEUE: Self::Queues;
    /// The job's own retry policy: `Some` only when the job writes `retry(...)`, in which
    /// case it replaces the queue's policy entirely.
    fn retry_policy() -> Option<RetryPolicy>;
    /// The job's own timeout, overriding the queue's.
    fn timeout() -> Option<Duration>;
    /// The fleet-wide limits of each key of this job type
    /// (`#[job(concurrency(key = .., limit = ..), rate(key = .., limit = "..", burst = ..))]`),
    /// which the operator's grants file may override; none by default.
    fn limits() -> JobLimits {
        JobLimits::default()
    }
    /// The periodic schedule the fleet fires this job type on (`#[job(cron = "..")]` or
    /// `#[job(every = "..")]`), which the operator's grants file may override; none by
    /// default.
    fn schedule() -> Option<crate::schedule::Schedule> {
        None
    }
}

/// A queue's broker settings and its retry floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// The broker name; hold and dead-letter queues are named after it.
    pub name: String,
    /// How many unacknowledged deliveries a consumer may hold (1..=65535, default 16).
    pub prefetch: u16,
    /// Whether the queue survives a broker restart (default true; a quorum queue always
    /// does).
    pub durable: bool,
    /// How the broker keeps the queue and its hold and dead-letter queues (default
    /// [`QueueType::Classic`]).
    #[serde(default)]
    pub queue_type: QueueType,
    /// The highest message priority, `x-max-priority` (default 10; 0 means none).
    pub max_priority: u8,
    /// `x-message-ttl`, when set.
    pub message_ttl: Option<Duration>,
    /// The policy of every job on this queue that has none of its own
    /// ([`RetryPolicy::default`] when the queue writes no `retry(...)`).
    pub retry: RetryPolicy,
    /// How long one attempt may run, unless the job says otherwise.
    pub timeout: Option<Duration>,
}

impl QueueConfig {
    /// A queue named `name` with every default.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            prefetch: 16,
            durable: true,
            queue_type: QueueType::Classic,
            max_priority: 10,
            message_ttl: None,
            retry: RetryPolicy::default(),
            timeout: None,
        }
    }
}

/// How the broker keeps a queue, its dead-letter queue and its hold queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueType {
    /// A RabbitMQ classic queue on one node: the fastest, what `queuey` declares, and lost
    /// with its node. Its dead-lettering (a hold queue releasing a retry) is at-most-once.
    #[default]
    Classic,
    /// A RabbitMQ quorum queue, replicated over the cluster's nodes (Raft): it survives the
    /// loss of a minority of them. Always durable; hold queues dead-letter at-least-once,
    /// so a retry is never dropped between hold queue and work queue. Message priority is
    /// not what it is on a classic queue: see docs/scaling.md, "Priorities on quorum queues".
    Quorum,
}

impl QueueType {
    /// The broker's name for it, the value of `x-queue-type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Quorum => "quorum",
        }
    }

    /// The other type: what a queue declared as this one may exist as already.
    pub fn other(self) -> Self {
        match self {
            Self::Classic => Self::Quorum,
            Self::Quorum => Self::Classic,
        }
    }
}

impl std::fmt::Display for QueueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
