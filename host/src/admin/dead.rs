//! Dead-letter operations and queue depths on either backend, as the admin API and the
//! CLI offer them.

use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use crate::broker::{
    Backend, BrokerError, DeadLetterOut, MemoryBackend, QueueDepth, RabbitMqBackend,
};
use crate::envelope::Envelope;

use super::api::{DeadLetterView, PurgeReport, ReplayReport};

/// A backend the admin API can serve: the worker's [`Backend`] plus what an operator does
/// with dead letters.
pub trait AdminBackend: Backend + Clone {
    /// `"memory"` or `"rabbitmq"`, for `/healthz` and logs.
    const KIND: &'static str;

    /// Up to `limit` dead letters of `queue`, oldest first, left in place.
    fn list_dead(
        &self,
        queue: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeadLetterView>, BrokerError>> + Send;

    /// Put the dead letters of `queue` back on it as attempt 1 with their job ids; bodies
    /// that are not envelopes stay dead.
    fn replay_dead(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<ReplayReport, BrokerError>> + Send;

    /// Drop the dead letters of `queue`.
    fn purge_dead(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<PurgeReport, BrokerError>> + Send;

    /// Take the dead letter of job `job_id` out of `queue`'s dead letters, putting it back
    /// on `queue` as attempt 1 when `replay`, dropping it otherwise; whether it was there.
    fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// What waits on `queue`, in its dead letters and in its hold queues.
    fn depth(&self, queue: &str) -> impl Future<Output = Result<QueueDepth, BrokerError>> + Send;
}

impl AdminBackend for MemoryBackend {
    const KIND: &'static str = "memory";

    async fn list_dead(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetterView>, BrokerError> {
        Ok(self
            .dead_letters(queue)
            .iter()
            .take(limit)
            .map(|letter| {
                DeadLetterView::new(
                    &letter.body,
                    Some(letter.reason.clone()),
                    Some(letter.attempts),
                )
            })
            .collect())
    }

    async fn replay_dead(&self, queue: &str) -> Result<ReplayReport, BrokerError> {
        let mut report = ReplayReport {
            replayed: 0,
            skipped: 0,
        };
        for letter in self.take_dead_letters(queue) {
            match letter.envelope() {
                Some(envelope) => {
                    self.publish(&first_attempt(queue, envelope), None).await?;
                    report.replayed += 1;
                }
                None => {
                    let back = DeadLetterOut {
                        queue,
                        body: &letter.body,
                        reason: &letter.reason,
                        attempts: letter.attempts,
                        trace: letter.trace.as_ref(),
                    };
                    self.dead_letter(back).await?;
                    report.skipped += 1;
                }
            }
        }
        Ok(report)
    }

    async fn purge_dead(&self, queue: &str) -> Result<PurgeReport, BrokerError> {
        let purged = self.take_dead_letters(queue).len();
        Ok(PurgeReport {
            purged: u32::try_from(purged).unwrap_or(u32::MAX),
        })
    }

    async fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> Result<bool, BrokerError> {
        let Some(envelope) = self
            .take_dead_letter(queue, job_id)
            .and_then(|letter| letter.envelope())
        else {
            return Ok(false);
        };
        if replay {
            self.publish(&first_attempt(queue, envelope), None).await?;
        }
        Ok(true)
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        Ok(MemoryBackend::depth(self, queue))
    }
}

impl AdminBackend for Arc<RabbitMqBackend> {
    const KIND: &'static str = "rabbitmq";

    async fn list_dead(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetterView>, BrokerError> {
        let letters = self.dead_letters(queue, limit).await?;
        Ok(letters
            .into_iter()
            .map(|letter| DeadLetterView::new(&letter.body, letter.reason, letter.attempts))
            .collect())
    }

    async fn replay_dead(&self, queue: &str) -> Result<ReplayReport, BrokerError> {
        let replayed = self.replay_dead_letters(queue).await?;
        Ok(ReplayReport {
            replayed: replayed.replayed,
            skipped: replayed.skipped,
        })
    }

    async fn purge_dead(&self, queue: &str) -> Result<PurgeReport, BrokerError> {
        Ok(PurgeReport {
            purged: self.purge_dead_letters(queue).await?,
        })
    }

    async fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> Result<bool, BrokerError> {
        self.take_dead_letter(queue, job_id, replay).await
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, BrokerError> {
        RabbitMqBackend::depth(self, queue).await
    }
}

/// The envelope a replay publishes: the same job, as a first attempt on `queue`, the way
/// [`RabbitMqBackend::replay_dead_letters`] does it.
fn first_attempt(queue: &str, envelope: Envelope) -> Envelope {
    Envelope {
        queue: queue.to_owned(),
        attempt: 1,
        priority: 0,
        ..envelope
    }
}
