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
use super::tally::Settled;
use super::unsettled::MessageKey;
use crate::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery};
use crate::envelope::Envelope;
use crate::policy::HoldDelay;
use crate::text::{NAME_MAX, REASON_MAX, bounded};
use crate::trace::DeliveryTrace;

pub(super) type DeliveryOf<B> = <<B as Backend>::Consumer as Consumer>::Delivery;

/// What happens to a delivery once its handler has run.
#[derive(Debug)]
pub(super) enum Settlement {
    Ack {
        follow_ups: Vec<(Envelope, Option<HoldDelay>)>,
    },
    Republish {
        /// [`Settled::Retried`] or [`Settled::Deferred`].
        kind: Settled,
        next: Envelope,
        delay: HoldDelay,
    },
    DeadLetter {
        reason: String,
        attempts: u32,
    },
}

impl Settlement {
    /// A dead letter whose reason is bounded, because it may quote what a producer or a
    /// plugin sent.
    pub(super) fn dead_letter(reason: &str, attempts: u32) -> Self {
        Self::DeadLetter {
            reason: bounded(reason, REASON_MAX).into_owned(),
            attempts,
        }
    }

    /// What kind of settlement this is, for the worker's summary.
    fn settled(&self) -> Settled {
        match self {
            Self::Ack { .. } => Settled::Completed,
            Self::Republish {
                kind: Settled::Deferred,
                ..
            } => Settled::Deferred,
            Self::Republish { .. } => Settled::Retried,
            Self::DeadLetter { .. } => Settled::DeadLettered,
        }
    }

    /// A dead letter's reason.
    fn dead_letter_reason(&self) -> Option<&str> {
        match self {
            Self::DeadLetter { reason, .. } => Some(reason),
            Self::Ack { .. } | Self::Republish { .. } => None,
        }
    }

    /// What this settlement publishes, for a reason.
    fn what(&self) -> &'static str {
        match self {
            Self::Ack { .. } => "a follow-up job",
            Self::Republish {
                kind: Settled::Deferred,
                ..
            } => "deferral",
            Self::Republish { .. } => "retry",
            Self::DeadLetter { .. } => "the dead letter",
        }
    }

    /// The attempt a dead letter replacing this settlement records.
    fn attempts(&self, delivery: &impl Delivery) -> u32 {
        match self {
            Self::Republish { next, .. } => next.attempt,
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
                let reason = format!("{} could not be published: {err}", settlement.what());
                let attempts = settlement.attempts(&delivery);
                let letter = Settlement::dead_letter(&reason, attempts);
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
            Settlement::Republish { next, delay, .. } => backend.publish(next, Some(*delay)).await,
            Settlement::DeadLetter { reason, attempts } => {
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

    /// Count the settlement for the worker's periodic summary and its metrics; a
    /// completion is logged at debug only, because a line per job costs more than the job
    /// (see docs/cli.md, "Logs").
    fn log_settled(&self, job: Option<&Envelope>, settlement: &Settlement) {
        self.shared.tally.count(settlement.settled());
        self.seen
            .settled(settlement.settled(), job, settlement.dead_letter_reason());
        let (queue, trace_id) = (self.queue, self.trace.job.trace_id);
        match settlement {
            Settlement::Ack { follow_ups } => {
                debug!(follow_ups = follow_ups.len(), "job completed");
            }
            Settlement::Republish { .. } => debug!("job republished"),
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
