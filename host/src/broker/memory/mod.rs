//! The embedded in-process backend: RabbitMQ's semantics without a broker.
//!
//! Work queues order by priority then arrival; hold queues are timers on tokio's clock
//! (so tests under `start_paused` run in milliseconds); dead letters keep their reason; a
//! concurrency cap's permit queue is a count of the permits held (`permits`); a rate
//! limit's token queue is a token bucket on tokio's clock (`tokens`).
//! Nothing survives the process. Inspection methods (`pending`, `acked`, `deferred`,
//! `dead_letters`, `hold_queues`) exist so tests can assert what the broker would hold.
//!
//! Memory is bounded by what the queues hold, as on a broker: [`MemoryBackend::embedded`],
//! the host's embedded default, keeps no record of acked or held envelopes and forgets
//! expired hold queues. [`MemoryBackend::new`] records them for inspection, and so grows
//! with every job: it is for tests.
//!
//! Operator orders (pause, resume, cancel) are kept in memory too (`control`), and so are
//! the schedulers' lead and firing history (`schedule`) and the batch log (`batches`).

mod batches;
mod control;
mod log;
mod permits;
mod recordings;
mod schedule;
mod state;
mod tokens;
mod unique;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jobhost_sdk::QueueConfig;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use uuid::Uuid;

use super::dead::{
    DeadLetterView, HEADER_ATTEMPTS, HEADER_DEATH_REASON, HEADER_ORIGINAL_QUEUE, Listing,
    first_attempt,
};
use super::hold::{HoldQueue, check_queue_name};
use super::{
    Backend, BatchRecord, BrokerError, Consumer, DeadLetterList, DeadLetterOut, DeadLetters,
    Delivery, Permits, QueueDepth, Replayed, Taken, Tokens, UniqueLock,
};
use crate::envelope::Envelope;
use crate::policy::HoldDelay;
use crate::trace::{TRACEPARENT, TRACESTATE, TraceContext};
use permits::PermitTable;
use state::{Message, State};
use tokens::TokenTable;

pub use batches::MemoryBatchFollower;
pub use control::MemoryFollower;
pub use permits::MemoryLease;
pub use state::{DeadLetter, HeldMessage};

/// The in-process backend. Clones share the same queues.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    orders: Arc<control::Orders>,
    batches: Arc<batches::BatchLog>,
    permits: PermitTable,
    tokens: TokenTable,
    schedules: Arc<schedule::Board>,
    recordings: Arc<recordings::Shelf>,
}

impl MemoryBackend {
    /// An empty broker that records every acked and held envelope for inspection
    /// ([`acked`](Self::acked), [`deferred`](Self::deferred)): for tests, as it grows with
    /// every job.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty broker that keeps nothing but what its queues hold, for a long-running
    /// host: [`acked`](Self::acked) and [`deferred`](Self::deferred) stay empty.
    pub fn embedded() -> Self {
        Self {
            state: Arc::new(Mutex::new(State::unrecorded())),
            orders: Arc::default(),
            batches: Arc::default(),
            permits: PermitTable::default(),
            tokens: TokenTable::default(),
            schedules: Arc::default(),
            recordings: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Because no code path panics while holding the lock, a poisoned lock would only
        // follow a panic elsewhere in the same test; its data is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many permits of `permits` are held now.
    pub fn permits_held(&self, permits: &Permits) -> u32 {
        self.permits.held(permits)
    }

    /// Envelopes ready on `queue`, in the order they would be delivered.
    pub fn pending(&self, queue: &str) -> Vec<Envelope> {
        self.lock()
            .queue(queue)
            .map(|q| q.pending())
            .unwrap_or_default()
    }

    /// How many messages are ready on `queue`, envelopes or not.
    pub fn ready(&self, queue: &str) -> usize {
        self.lock().queue(queue).map_or(0, |q| q.ready_len())
    }

    /// Publish a raw body onto `queue`, as a foreign or broken producer might.
    pub fn publish_raw(&self, queue: &str, body: Vec<u8>) -> Result<(), BrokerError> {
        let mut state = self.lock();
        let q = state
            .queue_mut(queue)
            .ok_or_else(|| BrokerError::UnknownQueue(queue.to_owned()))?;
        q.push(Message::new(body, 0));
        Ok(())
    }

    /// Envelopes acked on `queue`, in ack order. A retry acks the envelope it replaces,
    /// so this counts attempts, not jobs.
    pub fn acked(&self, queue: &str) -> Vec<Envelope> {
        self.lock()
            .queue(queue)
            .map(|q| q.acked.clone())
            .unwrap_or_default()
    }

    /// Every envelope published into a hold queue of `queue` (retries and deferrals), in
    /// publish order, with the hold queue's delay.
    pub fn deferred(&self, queue: &str) -> Vec<HeldMessage> {
        self.lock()
            .queue(queue)
            .map(|q| q.held.clone())
            .unwrap_or_default()
    }

    /// The dead letters of `queue`, oldest first.
    pub fn dead_letters(&self, queue: &str) -> Vec<DeadLetter> {
        self.lock()
            .queue(queue)
            .map(|q| q.dead.clone())
            .unwrap_or_default()
    }

    /// Remove and return the dead letters of `queue`.
    pub fn take_dead_letters(&self, queue: &str) -> Vec<DeadLetter> {
        self.lock()
            .queue_mut(queue)
            .map(|q| std::mem::take(&mut q.dead))
            .unwrap_or_default()
    }

    /// What waits on `queue`, in its dead-letter queue and in its hold queues.
    pub fn depth(&self, queue: &str) -> QueueDepth {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        self.lock()
            .queue(queue)
            .map_or_else(QueueDepth::default, |q| QueueDepth {
                ready: count(q.ready_len()),
                dead: count(q.dead.len()),
                held: count(q.waiting),
            })
    }

    /// The hold queues of `queue` that exist now (not yet expired), with their TTLs.
    pub fn hold_queues(&self, queue: &str) -> Vec<(String, Duration)> {
        let now = Instant::now();
        self.lock()
            .queue(queue)
            .map(|q| q.live_hold_queues(now))
            .unwrap_or_default()
    }

    /// How many distinct hold queues `queue` has ever had.
    pub fn hold_queues_created(&self, queue: &str) -> usize {
        self.lock().queue(queue).map_or(0, |q| q.hold_expiry.len())
    }

    /// Deliveries handed to consumers of `queue` and not yet settled.
    pub fn unacked(&self, queue: &str) -> usize {
        self.lock().queue(queue).map_or(0, |q| q.unacked)
    }

    /// Messages waiting in hold queues of `queue`.
    pub fn waiting(&self, queue: &str) -> usize {
        self.lock().queue(queue).map_or(0, |q| q.waiting)
    }

    /// Names of the declared work queues.
    pub fn queues(&self) -> Vec<String> {
        self.lock().queue_names()
    }

    fn release_after(&self, queue: String, message: Message, delay: Duration) {
        let backend = self.clone();
        // The timer task holds the message the way a hold queue does: nothing in the worker
        // waits for it, and it lands on the work queue when the TTL expires.
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut state = backend.lock();
            if let Some(q) = state.queue_mut(&queue) {
                q.waiting -= 1;
                q.push(message);
            }
        });
    }
}

impl Backend for MemoryBackend {
    type Consumer = MemoryConsumer;
    type Lease = MemoryLease;

    async fn declare(&self, queue: &QueueConfig) -> Result<(), BrokerError> {
        check_queue_name(&queue.name)?;
        self.lock().declare(queue);
        Ok(())
    }

    async fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> Result<(), BrokerError> {
        let message = Message::of(envelope);
        let mut state = self.lock();
        let q = state
            .queue_mut(&envelope.queue)
            .ok_or_else(|| BrokerError::UnknownQueue(envelope.queue.clone()))?;
        let Some(delay) = delay else {
            q.push(message);
            return Ok(());
        };
        let hold = HoldQueue::for_delay(&envelope.queue, delay);
        q.hold(hold, envelope, delay.get(), Instant::now());
        drop(state);
        self.release_after(envelope.queue.clone(), message, delay.get());
        Ok(())
    }

    async fn dead_letter(&self, letter: DeadLetterOut<'_>) -> Result<(), BrokerError> {
        let mut state = self.lock();
        let q = state
            .queue_mut(letter.queue)
            .ok_or_else(|| BrokerError::UnknownQueue(letter.queue.to_owned()))?;
        q.dead.push(DeadLetter {
            body: letter.body.to_vec(),
            reason: letter.reason.to_owned(),
            attempts: letter.attempts,
            trace: letter.trace.cloned(),
        });
        Ok(())
    }

    async fn consume(&self, queue: &QueueConfig) -> Result<MemoryConsumer, BrokerError> {
        let notify = self
            .lock()
            .queue(&queue.name)
            .map(|q| q.notify.clone())
            .ok_or_else(|| BrokerError::UnknownQueue(queue.name.clone()))?;
        Ok(MemoryConsumer {
            backend: self.clone(),
            queue: queue.name.clone(),
            prefetch: Arc::new(Semaphore::new(usize::from(queue.prefetch.max(1)))),
            notify,
        })
    }

    async fn take_unique(&self, lock: &UniqueLock, job_id: Uuid) -> Result<Taken, BrokerError> {
        Ok(self.lock().unique.take(lock, job_id, Instant::now()))
    }

    async fn release_unique(&self, lock: &UniqueLock, job_id: Uuid) -> Result<(), BrokerError> {
        self.lock().unique.release(lock, job_id);
        Ok(())
    }

    async fn record_batch(&self, record: &BatchRecord) -> Result<(), BrokerError> {
        self.batches.append(record);
        Ok(())
    }

    async fn take_permit(&self, permits: &Permits) -> Result<Option<MemoryLease>, BrokerError> {
        Ok(self.permits.take(permits))
    }

    async fn take_token(&self, tokens: &Tokens) -> Result<bool, BrokerError> {
        Ok(self.tokens.take(tokens))
    }

    async fn hold_tokens(&self, tokens: &Tokens, delay: Duration) -> Result<(), BrokerError> {
        self.tokens.hold(tokens, delay);
        Ok(())
    }

    /// In memory a consumer receives deliveries as fast as any thread can run them, so
    /// every job gets a task and the runtime's threads run them side by side.
    fn inline_limit(&self) -> Option<Duration> {
        None
    }
}

/// The same contract as on RabbitMQ, one letter at a time: a replay or take takes each
/// letter off the head of the dead letters and either removes it or puts it back at the
/// tail; a listing moves the letters it reads behind the others.
impl DeadLetters for MemoryBackend {
    async fn list_dead(&self, queue: &str, limit: usize) -> Result<DeadLetterList, BrokerError> {
        let mut state = self.lock();
        let Some(q) = state.queue_mut(queue) else {
            return Ok(Listing::new(0).finish());
        };
        let mut listing = Listing::new(u64::try_from(q.dead.len()).unwrap_or(u64::MAX));
        let read = limit.min(q.dead.len());
        for letter in &q.dead[..read] {
            listing.add(|| DeadLetterView::new(&letter.body, letter_headers(queue, letter)));
        }
        // Where RabbitMQ's copies of the letters read go: behind the others.
        q.dead.rotate_left(read);
        Ok(listing.finish())
    }

    async fn replay_dead(&self, queue: &str) -> Result<Replayed, BrokerError> {
        let mut outcome = Replayed::default();
        for _ in 0..self.dead_count(queue) {
            let Some(letter) = self.take_first_dead(queue) else {
                break;
            };
            match letter.envelope() {
                Some(envelope) => {
                    self.publish(&first_attempt(queue, envelope), None).await?;
                    outcome.replayed += 1;
                }
                None => {
                    self.keep_dead(queue, letter);
                    outcome.skipped += 1;
                }
            }
        }
        Ok(outcome)
    }

    async fn purge_dead(&self, queue: &str) -> Result<u32, BrokerError> {
        let purged = self.take_dead_letters(queue).len();
        Ok(u32::try_from(purged).unwrap_or(u32::MAX))
    }

    async fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> Result<bool, BrokerError> {
        for _ in 0..self.dead_count(queue) {
            let Some(letter) = self.take_first_dead(queue) else {
                break;
            };
            match letter.envelope() {
                Some(envelope) if envelope.job_id == job_id => {
                    if replay {
                        self.publish(&first_attempt(queue, envelope), None).await?;
                    }
                    return Ok(true);
                }
                _ => self.keep_dead(queue, letter),
            }
        }
        Ok(false)
    }
}

impl MemoryBackend {
    fn dead_count(&self, queue: &str) -> usize {
        self.lock().queue(queue).map_or(0, |q| q.dead.len())
    }

    fn take_first_dead(&self, queue: &str) -> Option<DeadLetter> {
        let mut state = self.lock();
        let dead = &mut state.queue_mut(queue)?.dead;
        (!dead.is_empty()).then(|| dead.remove(0))
    }

    /// Put `letter` back at the tail of `queue`'s dead letters, as a copy published there.
    fn keep_dead(&self, queue: &str, letter: DeadLetter) {
        if let Some(q) = self.lock().queue_mut(queue) {
            q.dead.push(letter);
        }
    }
}

/// The headers a dead letter of `queue` carries on RabbitMQ.
fn letter_headers(queue: &str, letter: &DeadLetter) -> Vec<(String, String)> {
    let mut headers = vec![
        (HEADER_DEATH_REASON.to_owned(), letter.reason.clone()),
        (HEADER_ORIGINAL_QUEUE.to_owned(), queue.to_owned()),
        (HEADER_ATTEMPTS.to_owned(), letter.attempts.to_string()),
    ];
    if let Some(trace) = &letter.trace {
        headers.push((TRACEPARENT.to_owned(), trace.parent.to_string()));
        if let Some(state) = &trace.state {
            headers.push((TRACESTATE.to_owned(), state.as_str().to_owned()));
        }
    }
    headers
}

/// A consumer of one in-memory work queue, holding at most `prefetch` unsettled deliveries.
#[derive(Debug)]
pub struct MemoryConsumer {
    backend: MemoryBackend,
    queue: String,
    prefetch: Arc<Semaphore>,
    notify: Arc<tokio::sync::Notify>,
}

impl Consumer for MemoryConsumer {
    type Delivery = MemoryDelivery;

    async fn next(&mut self) -> Option<MemoryDelivery> {
        let permit = self.prefetch.clone().acquire_owned().await.ok()?;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(message) = self.backend.lock().queue_mut(&self.queue)?.pop() {
                return Some(MemoryDelivery {
                    backend: self.backend.clone(),
                    queue: self.queue.clone(),
                    message: Some(message),
                    _permit: permit,
                });
            }
            notified.await;
        }
    }

    async fn close(self) {}
}

/// A message taken from an in-memory queue. Dropped unsettled, it goes back to the queue
/// as redelivered, as RabbitMQ does with the unacked messages of a closed channel.
#[derive(Debug)]
pub struct MemoryDelivery {
    backend: MemoryBackend,
    queue: String,
    message: Option<Message>,
    _permit: OwnedSemaphorePermit,
}

impl MemoryDelivery {
    fn settle(&mut self, ack: bool) {
        let Some(message) = self.message.take() else {
            return;
        };
        let mut state = self.backend.lock();
        if let Some(q) = state.queue_mut(&self.queue) {
            if ack {
                q.ack(&message);
            } else {
                q.requeue(message);
            }
        }
    }
}

impl Delivery for MemoryDelivery {
    fn body(&self) -> &[u8] {
        self.message.as_ref().map_or(&[], |m| &m.body)
    }

    fn redelivered(&self) -> bool {
        self.message.as_ref().is_some_and(|m| m.redelivered)
    }

    fn trace_context(&self) -> Option<TraceContext> {
        self.message.as_ref().and_then(|m| m.trace.clone())
    }

    async fn ack(mut self) -> Result<(), BrokerError> {
        self.settle(true);
        Ok(())
    }

    async fn requeue(mut self) -> Result<(), BrokerError> {
        self.settle(false);
        Ok(())
    }
}

impl Drop for MemoryDelivery {
    fn drop(&mut self) {
        self.settle(false);
    }
}

#[cfg(test)]
mod tests;
