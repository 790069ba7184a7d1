//! How many messages wait around a work queue: passive declarations of the work queue,
//! its dead-letter queue and the hold queues this backend published into.
//!
//! RabbitMQ answers a passive declaration with the queue's ready-message count, so a depth
//! costs one round trip per queue and takes nothing off any queue. Hold queues are named
//! after their delays, which the broker cannot list over AMQP, so the backend counts those
//! in its registry ([`Holds`](super::holds::Holds)).

use super::RabbitMqBackend;
use super::admin::present;
use crate::broker::{BrokerError, QueueDepth, dead_letter_queue_name};

impl RabbitMqBackend {
    /// The messages waiting on `queue`, in `{queue}.dead` and in the hold queues this
    /// backend published into. A queue that does not exist (yet, or any more) counts as
    /// empty.
    pub async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        let session = self.admin_session(queue).await?;
        let mut depth = QueueDepth {
            ready: present(&session, queue).await?.into(),
            dead: present(&session, &dead_letter_queue_name(queue))
                .await?
                .into(),
            held: 0,
        };
        for hold in self.link.holds.of(queue) {
            depth.held += u64::from(present(&session, &hold).await?);
        }
        Ok(depth)
    }
}
