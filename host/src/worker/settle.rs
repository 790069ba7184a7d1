//! Step 5 of the per-delivery algorithm: publish what replaces a delivery, then ack it.
//!
//! A publish that can never succeed ([`BrokerError::is_permanent`]) turns the settlement
//! into a dead letter naming the cause; any other failure gives the delivery back to the
//! broker, counted, so its redelivery waits a backoff (step 0). Every message published
//! carries its trace context: follow-ups theirs (set by the worker), retries and
//! deferrals the envelope's, dead letters the delivery's [`DeliveryTrace::carried`].

use tracing::{debug, error, warn};

use super::Shared;
use super::observe::Observation;
use super::unsettled::MessageKey;
use crate::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery};
use crate::envelope::Envelope;
use crate::job::{DeadCause, Settled, Throttle};
use crate::policy::HoldDelay;
use crate::text::{NAME_MAX, REASON_MAX, bounded};
use crate::trace::DeliveryTrace;

pub(super) type DeliveryOf<B> = <<B as Backend>::Consumer as Consumer>::Delivery;

/// What happens to a delivery once its handler has run: what the worker publishes before
/// it acks. Once acked, it becomes the [`Settled`] its observers read.
#[derive(Debug)]
pub(super) enum Settlement {
    Ack {
        follow_ups: Vec<(Envelope, Option<HoldDelay>)>,
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

    /// What the delivery was settled as, for its observers.
    fn settled(&self) -> Settled {
        match self {
            Self::Ack { .. } => Settled::Completed,
            Self::Retry { .. } => Settled::Retried,
            Self::Defer { .. } => Settled::Deferred,
            Self::Throttled { throttle, .. } => Settled::Throttled(*throttle),
            Self::DeadLetter { cause, .. } => Settled::DeadLettered(cause.clone()),
        }
    }

    /// What this settlement publishes, for a reason.
    fn what(&self) -> &'static str {
        match self {
            Self::Ack { .. } => "a follow-up job",
            Self::Defer { .. } => "deferral",
            Self::Throttled { .. } => "a throttled job",
            Self::Retry { .. } => "retry",
            Self::DeadLetter { .. } => "the dead letter",
        }
    }

    /// The attempt a dead letter replacing this settlement records.
    fn attempts(&self, delivery: &impl Delivery) -> u32 {
        match self {
            Self::Retry { next, .. } | Self::Defer { next, .. } | Self::Throttled { next, .. } => {
                next.attempt
            }
            Self::DeadLetter { attempts, .. } => *attempts,
            Self::Ack { .. } => Envelope::decode(delivery.body()).map_or(0, |e| e.attempt),
        }
    }
}

/// Where and as what one delivery is settled: the worker, the queue it came from, its
/// trace and its metrics.
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
            Err(err)
                if err.is_permanent() && !matches!(settlement, Settlement::DeadLetter { .. }) =>
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
        match delivery.ack().await {
            Ok(()) => {
                if let Some(key) = key {
                    self.shared.unsettled.settled(key);
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
            Settlement::Ack { follow_ups } => {
                for (envelope, delay) in follow_ups {
                    backend.publish(envelope, *delay).await?;
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

    /// Hand the settlement to its observers (the worker's periodic summary, the metrics,
    /// the dashboard's activity); a completion is logged at debug only, because a line per
    /// job costs more than the job (see docs/cli.md, "Logs").
    fn log_settled(&self, job: Option<&Envelope>, settlement: &Settlement) {
        let settled = settlement.settled();
        self.seen.settled(&settled, job, &self.shared.tally);
        let (queue, trace_id) = (self.queue, self.trace.job.trace_id);
        match settlement {
            Settlement::Ack { follow_ups } => {
                debug!(follow_ups = follow_ups.len(), "job completed");
            }
            Settlement::Retry { .. } | Settlement::Defer { .. } | Settlement::Throttled { .. } => {
                debug!("job republished")
            }
            Settlement::DeadLetter { reason, .. } => match job {
                Some(job) => warn!(
                    %queue,
                    job_id = %job.job_id,
                    job_type = %bounded(&job.job_type, NAME_MAX),
                    attempt = job.attempt,
                    %trace_id,
                    %reason,
                    "job dead-lettered"
                ),
                None => warn!(%queue, %trace_id, %reason, "message dead-lettered"),
            },
        }
    }
}
