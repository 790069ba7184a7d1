//! Step 5 of the per-delivery algorithm: publish what replaces a delivery, then ack it.
//!
//! An expired job is published to the dead-letter queue like a dead letter, with its
//! expiry as the reason, and observed as [`Settled::Expired`].
//!
//! A batch member settled for good has how it ended appended to the fleet's batch log
//! after the publish and before the ack; a failure to append leaves the delivery to the
//! broker like a failed publish.
//!
//! A job that holds a unique lock lets go of it once it is settled for good (acked as
//! completed, dead-lettered, expired), after its ack, so the key is never free while the
//! job can still come back; a retry or deferral keeps it, because the job still waits. A
//! release that fails leaves the lock to end with its `for`.
//!
//! A publish that can never succeed ([`BrokerError::is_permanent`]) turns the settlement
//! into a dead letter naming the cause; any other failure gives the delivery back to the
//! broker, counted, so its redelivery waits a backoff (step 0). Every message published
//! carries its trace context: follow-ups theirs (set by the worker), retries and
//! deferrals the envelope's, dead letters the delivery's [`DeliveryTrace::carried`].

use tracing::{debug, error, info, warn};
use uuid::Uuid;

use super::Shared;
use super::observe::Observation;
use super::unsettled::MessageKey;
use crate::broker::{
    Backend, BatchRecord, BrokerError, Consumer, DeadLetterOut, Delivery, MemberEnd, UniqueLock,
};
use crate::envelope::Envelope;
use crate::job::{Cancellation, DeadCause, Expired, Settled, Throttle};
use crate::policy::HoldDelay;
use crate::producer::publish_new;
use crate::telemetry::Event;
use crate::text::{NAME_MAX, REASON_MAX, bounded};
use crate::trace::DeliveryTrace;

pub(super) type DeliveryOf<B> = <<B as Backend>::Consumer as Consumer>::Delivery;

/// What happens to a delivery once its handler has run: what the worker publishes before
/// it acks. Once acked, it becomes the [`Settled`] its observers read.
#[derive(Debug)]
pub(super) enum Settlement {
    Ack {
        follow_ups: Vec<(Envelope, Option<HoldDelay>)>,
        /// The batches the handler opened or added to, appended to the batch log before
        /// their members are published.
        batches: Vec<BatchRecord>,
    },
    Retry {
        next: Envelope,
        delay: HoldDelay,
    },
    Defer {
        next: Envelope,
        delay: HoldDelay,
    },
    /// Held back by a cap or a rate limit (see `caps`, `rates`): the job, unchanged,
    /// waits in a hold queue.
    Throttled {
        next: Envelope,
        delay: HoldDelay,
        throttle: Throttle,
    },
    DeadLetter {
        cause: DeadCause,
        /// The cause rendered once and bounded, because it may quote what a producer or a
        /// plugin sent.
        reason: String,
        attempts: u32,
    },
    /// Not run (again), because its deadline passed or would pass before its hold ends: a
    /// letter in the dead-letter queue all the same, so an operator sees it.
    Expire {
        expired: Expired,
        /// The expiry rendered once and bounded, because a retry's quotes the failure.
        reason: String,
        attempts: u32,
    },
    /// An operator cancelled the job: it goes to the dead-letter queue, with the
    /// cancellation rendered once as its reason.
    Cancelled {
        cancellation: Cancellation,
        reason: String,
        attempts: u32,
    },
}

impl Settlement {
    /// A dead letter for `cause`.
    pub(super) fn dead_letter(cause: DeadCause, attempts: u32) -> Self {
        Self::DeadLetter {
            reason: bounded(&cause.to_string(), REASON_MAX).into_owned(),
            cause,
            attempts,
        }
    }

    /// The letter of a job that `expired`.
    pub(super) fn expire(expired: Expired, attempts: u32) -> Self {
        Self::Expire {
            reason: bounded(&expired.to_string(), REASON_MAX).into_owned(),
            expired,
            attempts,
        }
    }

    /// A cancelled job, whose last attempt (run or not) was `attempts`.
    pub(super) fn cancelled(cancellation: Cancellation, attempts: u32) -> Self {
        Self::Cancelled {
            reason: cancellation.to_string(),
            cancellation,
            attempts,
        }
    }

    /// What the delivery was settled as, for its observers.
    fn settled(&self) -> Settled {
        match self {
            Self::Ack { .. } => Settled::Completed,
            Self::Retry { .. } => Settled::Retried,
            Self::Defer { .. } => Settled::Deferred,
            Self::Expire { expired, .. } => Settled::Expired(expired.clone()),
            Self::Throttled { throttle, .. } => Settled::Throttled(*throttle),
            Self::DeadLetter { cause, .. } => Settled::DeadLettered(cause.clone()),
            Self::Cancelled { cancellation, .. } => Settled::Cancelled(cancellation.clone()),
        }
    }

    /// Whether the job is done with: nothing of it waits in a hold queue.
    fn is_final(&self) -> bool {
        !matches!(
            self,
            Self::Retry { .. } | Self::Defer { .. } | Self::Throttled { .. }
        )
    }

    /// What this settlement publishes, for a reason.
    fn what(&self) -> &'static str {
        match self {
            Self::Ack { .. } => "a follow-up job",
            Self::Defer { .. } => "deferral",
            Self::Throttled { .. } => "a throttled job",
            Self::Retry { .. } => "retry",
            Self::DeadLetter { .. } | Self::Expire { .. } | Self::Cancelled { .. } => {
                "the dead letter"
            }
        }
    }

    /// The attempt a dead letter replacing this settlement records.
    fn attempts(&self, delivery: &impl Delivery) -> u32 {
        match self {
            Self::Retry { next, .. } | Self::Defer { next, .. } | Self::Throttled { next, .. } => {
                next.attempt
            }
            Self::DeadLetter { attempts, .. }
            | Self::Expire { attempts, .. }
            | Self::Cancelled { attempts, .. } => *attempts,
            Self::Ack { .. } => Envelope::decode(delivery.body()).map_or(0, |e| e.attempt),
        }
    }
}

/// Where and as what one delivery is settled: the worker, the queue it came from, its
/// trace and its reports.
pub(super) struct Settling<'a, B> {
    shared: &'a Shared<B>,
    queue: &'a str,
    trace: &'a DeliveryTrace,
    seen: &'a Observation<'a>,
}

impl<'a, B: Backend> Settling<'a, B> {
    pub(super) fn new(
        shared: &'a Shared<B>,
        queue: &'a str,
        trace: &'a DeliveryTrace,
        seen: &'a Observation<'a>,
    ) -> Self {
        Self {
            shared,
            queue,
            trace,
            seen,
        }
    }

    /// Publish what replaces the delivery, then ack it. A publish that can never succeed
    /// becomes a dead letter naming the cause; any other failure leaves the delivery to the
    /// broker and counts against the message.
    pub(super) async fn settle(
        &self,
        delivery: DeliveryOf<B>,
        key: Option<MessageKey>,
        job: Option<&Envelope>,
        settlement: Settlement,
    ) {
        let settlement = match self.publish(&delivery, &settlement).await {
            Ok(()) => settlement,
            // A letter that cannot reach the dead-letter queue cannot be replaced by another.
            Err(err)
                if err.is_permanent()
                    && !matches!(
                        settlement,
                        Settlement::DeadLetter { .. }
                            | Settlement::Expire { .. }
                            | Settlement::Cancelled { .. }
                    ) =>
            {
                self.seen.publish_failed(&err);
                let cause = DeadCause::PublishFailed {
                    what: settlement.what(),
                    error: err.to_string(),
                };
                let letter = Settlement::dead_letter(cause, settlement.attempts(&delivery));
                if let Err(err) = self.publish(&delivery, &letter).await {
                    return self.unsettled(delivery, key, &err).await;
                }
                letter
            }
            Err(err) => return self.unsettled(delivery, key, &err).await,
        };
        if let Some(end) = batch_end(job, &settlement)
            && let Err(err) = self.shared.backend.record_batch(&end).await
        {
            if !err.is_permanent() {
                return self.unsettled(delivery, key, &err).await;
            }
            let error = bounded(&err.to_string(), REASON_MAX).into_owned();
            warn!(%error, "the batch log refused how a member ended: its batch will not count it");
        }
        let unique = settlement
            .is_final()
            .then(|| unique_lock(job, delivery.body()))
            .flatten();
        match delivery.ack().await {
            Ok(()) => {
                if let Some(key) = key {
                    self.shared.unsettled.settled(key);
                }
                if let Some((lock, job_id)) = unique {
                    self.release(&lock, job_id).await;
                }
                self.log_settled(job, &settlement);
            }
            Err(err) => {
                // The delivery is gone with the ack; a first delivery is counted from its
                // redelivery on, so only a redelivery's failed ack is counted here.
                if let Some(key) = key {
                    self.shared.unsettled.failed(key);
                }
                warn!(error = %err, "ack failed; the broker will redeliver the job");
            }
        }
    }

    /// Let go of the job's unique key; a failure leaves it to end with its `for`.
    async fn release(&self, lock: &UniqueLock, job_id: Uuid) {
        if let Err(err) = self.shared.backend.release_unique(lock, job_id).await {
            let error = bounded(&err.to_string(), REASON_MAX).into_owned();
            let lasts = lock.lasts();
            warn!(%error, ?lasts, "releasing the job's unique key failed; it is free when its `for` ends");
        }
    }

    /// The delivery could not be settled: give it back to the broker, counted.
    async fn unsettled(&self, delivery: DeliveryOf<B>, key: Option<MessageKey>, err: &BrokerError) {
        self.seen.publish_failed(err);
        let key = key.unwrap_or_else(|| MessageKey::of(self.queue, delivery.body()));
        let failures = self.shared.unsettled.failed(key);
        let error = bounded(&err.to_string(), REASON_MAX).into_owned();
        error!(%error, failures, "publish failed; the job goes back to the broker");
        if let Err(err) = delivery.requeue().await {
            warn!(error = %err, "requeue failed; the broker will redeliver the job");
        }
    }

    async fn publish(
        &self,
        delivery: &DeliveryOf<B>,
        settlement: &Settlement,
    ) -> Result<(), BrokerError> {
        let backend = &self.shared.backend;
        match settlement {
            Settlement::Ack {
                follow_ups,
                batches,
            } => {
                for record in batches {
                    backend.record_batch(record).await?;
                }
                for (envelope, delay) in follow_ups {
                    match publish_new(backend, envelope, *delay).await {
                        Ok(()) => {}
                        // Not the parent's failure: the job it asked for is queued already.
                        Err(BrokerError::Duplicate { job_type, existing }) => {
                            let holder =
                                existing.map_or_else(|| "unknown".to_owned(), |id| id.to_string());
                            info!(queue = %self.queue, job_id = %envelope.job_id, %job_type, %holder, "follow-up not enqueued: a job with its unique key is queued, held or running");
                            let event = Event::DuplicateRefused {
                                job_type: &job_type,
                            };
                            self.shared.config.telemetry.emit(&event);
                        }
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            }
            Settlement::Retry { next, delay }
            | Settlement::Defer { next, delay }
            | Settlement::Throttled { next, delay, .. } => {
                backend.publish(next, Some(*delay)).await
            }
            Settlement::DeadLetter {
                reason, attempts, ..
            }
            | Settlement::Expire {
                reason, attempts, ..
            }
            | Settlement::Cancelled {
                reason, attempts, ..
            } => {
                let letter = DeadLetterOut {
                    queue: self.queue,
                    body: delivery.body(),
                    reason,
                    attempts: *attempts,
                    trace: Some(&self.trace.carried),
                };
                backend.dead_letter(letter).await
            }
        }
    }

    /// Hand the settlement to the worker's periodic summary and to the host's telemetry
    /// (its metrics, the dashboard's activity); a completion is logged at debug only, because a line per
    /// job costs more than the job (see docs/cli.md, "Logs").
    fn log_settled(&self, job: Option<&Envelope>, settlement: &Settlement) {
        let settled = settlement.settled();
        self.seen.settled(&settled, job, &self.shared.tally);
        let (queue, trace_id) = (self.queue, self.trace.job.trace_id);
        /// The line of a job that leaves for the dead letters, at `$level`.
        macro_rules! ended {
            ($level:ident, $job:expr, $reason:expr, $message:literal) => {
                $level!(
                    %queue,
                    job_id = %$job.job_id,
                    job_type = %bounded(&$job.job_type, NAME_MAX),
                    attempt = $job.attempt,
                    %trace_id,
                    reason = %$reason,
                    $message
                )
            };
        }
        match settlement {
            Settlement::Ack { follow_ups, .. } => {
                debug!(follow_ups = follow_ups.len(), "job completed");
            }
            Settlement::Retry { .. } | Settlement::Defer { .. } | Settlement::Throttled { .. } => {
                debug!("job republished")
            }
            Settlement::DeadLetter { reason, .. } => match job {
                Some(job) => ended!(warn, job, reason, "job dead-lettered"),
                None => warn!(%queue, %trace_id, %reason, "message dead-lettered"),
            },
            // At info, not warn: the job did what its producer asked, which is not a failure.
            // Only an envelope can carry a deadline, so an expired delivery has a job.
            Settlement::Expire { reason, .. } => {
                if let Some(job) = job {
                    ended!(info, job, reason, "job expired");
                }
            }
            // Only an envelope's job id can be cancelled, so a cancelled delivery has a job.
            Settlement::Cancelled { reason, .. } => {
                if let Some(job) = job {
                    ended!(info, job, reason, "job cancelled");
                }
            }
        }
    }
}

/// The unique lock the settled job holds, and its id: from its envelope, or, for a message
/// settled before it was read as one (a poison message), from its body.
pub(super) fn unique_lock(job: Option<&Envelope>, body: &[u8]) -> Option<(UniqueLock, Uuid)> {
    let lock_of = |envelope: &Envelope| {
        let lock = UniqueLock::parse(envelope.unique_lock.as_deref()?)?;
        Some((lock, envelope.job_id))
    };
    match job {
        Some(job) => lock_of(job),
        None => lock_of(&Envelope::decode(body).ok()?),
    }
}

/// How a batch member ended, for the batch log: recorded before its ack, so a host that
/// dies in between leaves the member to be redelivered and recorded again, never lost
/// (the fold counts a member once, see `crate::batches`).
fn batch_end(job: Option<&Envelope>, settlement: &Settlement) -> Option<BatchRecord> {
    let job = job?;
    let end = match settlement {
        Settlement::Ack { .. } => MemberEnd::Completed,
        Settlement::DeadLetter { .. }
        | Settlement::Expire { .. }
        | Settlement::Cancelled { .. } => MemberEnd::Dead,
        Settlement::Retry { .. } | Settlement::Defer { .. } | Settlement::Throttled { .. } => {
            return None;
        }
    };
    Some(BatchRecord::End {
        batch: job.batch?,
        job_id: job.job_id,
        end,
    })
}
