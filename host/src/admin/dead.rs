//! The backends the admin API serves: what the worker and an operator use of a broker.

use std::future::Future;
use std::sync::Arc;

use crate::broker::{
    Backend, Batches, BrokerError, Control, DeadLetters, MemoryBackend, QueueDepth,
    RabbitMqBackend, Recordings, Schedules,
};

/// A backend the admin API can serve: the worker's [`Backend`], the operator's
/// [`DeadLetters`] and [`Control`] of the fleet, the schedulers' [`Schedules`], the recorded
/// attempts ([`Recordings`]), the batch log ([`Batches`]), and the depths
/// the dashboard shows.
pub trait AdminBackend:
    Backend + DeadLetters + Control + Schedules + Recordings + Batches + Clone
{
    /// `"memory"` or `"rabbitmq"`, for `/healthz` and logs.
    const KIND: &'static str;

    /// What waits on `queue`, in its dead letters and in its hold queues.
    fn depth(&self, queue: &str) -> impl Future<Output = Result<QueueDepth, BrokerError>> + Send;
}

impl AdminBackend for MemoryBackend {
    const KIND: &'static str = "memory";

    async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        Ok(MemoryBackend::depth(self, queue))
    }
}

impl AdminBackend for Arc<RabbitMqBackend> {
    const KIND: &'static str = "rabbitmq";

    async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        RabbitMqBackend::depth(self, queue).await
    }
}
