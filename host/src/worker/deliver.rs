//! The per-delivery algorithm (`design.md`, "Per-delivery flow").
//!
//! 1. Decode the envelope; a body that is not one is dead-lettered raw as
//!    `malformed envelope`.
//! 2. Refuse a payload above the size limit; find the route of its job type in the registry
//!    of *now*; none is dead-lettered as ``no handler for job type `X` ``.
//! 3. Resolve the effective policy and timeout now.
//! 4. Run the handler.
//! 5. Settle: ok acks (after publishing follow-ups); fatal and undecodable payloads
//!    dead-letter; retryable failures and crashes ask the policy, then retry through a hold
//!    queue or dead-letter; a deferral goes through a hold queue without spending an attempt.
//!
//! Every settlement that publishes does so before it acks; a failed publish requeues the
//! delivery, so the job is redelivered rather than lost.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use jobhost_sdk::{JobError, RetryDecision};
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::Shared;
use super::registry::{Registry, Route};
use crate::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery};
use crate::envelope::Envelope;
use crate::job::{FollowUp, Invocation, Outcome};
use crate::policy::effective_timeout;

type DeliveryOf<B> = <<B as Backend>::Consumer as Consumer>::Delivery;

/// What happens to a delivery once its handler has run.
#[derive(Debug)]
enum Settlement {
    Ack {
        follow_ups: Vec<(Envelope, Option<Duration>)>,
    },
    Republish {
        next: Envelope,
        delay: Duration,
    },
    DeadLetter {
        reason: String,
        attempts: u32,
    },
}

/// Handle one delivery from `queue`, from start to settlement.
pub(super) async fn deliver<B: Backend>(
    shared: Arc<Shared<B>>,
    queue: Arc<str>,
    delivery: DeliveryOf<B>,
) {
    let envelope = match Envelope::decode(delivery.body()) {
        Ok(envelope) => envelope,
        Err(err) => {
            warn!(%queue, error = %err, "dead-lettering a message that is not an envelope");
            let settlement = Settlement::DeadLetter {
                reason: "malformed envelope".into(),
                attempts: 0,
            };
            settle(&shared, delivery, &queue, settlement).await;
            return;
        }
    };
    let span = info_span!("job", job_id = %envelope.job_id, job_type = %envelope.job_type, attempt = envelope.attempt);
    async {
        let settlement = run(&shared, &envelope).await;
        settle(&shared, delivery, &queue, settlement).await;
    }
    .instrument(span)
    .await;
}

async fn run<B: Backend>(shared: &Shared<B>, envelope: &Envelope) -> Settlement {
    let size = envelope.payload.get().len();
    if size > shared.config.max_payload_bytes {
        let limit = shared.config.max_payload_bytes;
        return Settlement::DeadLetter {
            reason: format!("payload too large: {size} bytes, the limit is {limit} bytes"),
            attempts: envelope.attempt,
        };
    }
    let registry = shared.plugins.current();
    let Some(route) = registry.route(&envelope.job_type).cloned() else {
        return Settlement::DeadLetter {
            reason: format!("no handler for job type `{}`", envelope.job_type),
            attempts: envelope.attempt,
        };
    };
    let outcome = match invoke(shared, &route, envelope).await {
        Outcome::Completed { follow_ups } => {
            match route_follow_ups(shared, &registry, envelope, follow_ups) {
                Ok(follow_ups) => return Settlement::Ack { follow_ups },
                Err(failure) => Outcome::Failed(failure),
            }
        }
        outcome => outcome,
    };
    decide(shared, &route, envelope, outcome)
}

/// Run the handler; a panic in host code costs this attempt, not the worker, and the
/// delivery is still settled.
async fn invoke<B: Backend>(shared: &Shared<B>, route: &Route, envelope: &Envelope) -> Outcome {
    let job = Invocation {
        job_id: envelope.job_id,
        job_type: &envelope.job_type,
        queue: &envelope.queue,
        attempt: envelope.attempt,
        max_attempts: route.policy().max_attempts,
        deferrals: envelope.deferrals,
        priority: envelope.priority,
        age: envelope.age(),
        payload: envelope.payload.get().as_bytes(),
        timeout: effective_timeout(&route.job, &route.queue, shared.config.default_timeout),
    };
    // The call sits inside the async block so that a panic while building the future is
    // caught as well as one while polling it.
    let run = async { route.handler.invoke(job).await };
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => Outcome::Crashed(format!("the handler panicked: {}", panic_message(&*panic))),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn decide<B: Backend>(
    shared: &Shared<B>,
    route: &Route,
    envelope: &Envelope,
    outcome: Outcome,
) -> Settlement {
    let granularity = shared.config.retry_granularity;
    let failure = match outcome {
        Outcome::Completed { .. } => {
            return Settlement::Ack {
                follow_ups: Vec::new(),
            };
        }
        Outcome::Undecodable(err) => {
            return Settlement::DeadLetter {
                reason: format!("decode error: {err}"),
                attempts: envelope.attempt,
            };
        }
        Outcome::Failed(JobError::Fatal(msg)) => {
            return Settlement::DeadLetter {
                reason: format!("fatal error: {}", JobError::Fatal(msg)),
                attempts: envelope.attempt,
            };
        }
        Outcome::Failed(JobError::Deferred { delay, reason }) => {
            info!(%reason, delay = ?granularity.round(delay), "job deferred");
            let next = envelope.deferred(route.queue.max_priority);
            return Settlement::Republish {
                next,
                delay: granularity.round(delay),
            };
        }
        Outcome::Failed(failure) => failure,
        Outcome::Crashed(msg) => JobError::Retryable(msg),
    };
    let policy = route.policy();
    match policy.decide(envelope.attempt) {
        RetryDecision::Retry { delay } => {
            let delay = granularity.round(delay);
            info!(error = %failure, retry_in = ?delay, "job failed, retrying");
            Settlement::Republish {
                next: envelope.next_attempt(),
                delay,
            }
        }
        RetryDecision::GiveUp => Settlement::DeadLetter {
            reason: format!(
                "max attempts ({}) exhausted after attempt {}: {failure}",
                policy.max_attempts, envelope.attempt
            ),
            attempts: envelope.attempt,
        },
    }
}

async fn settle<B: Backend>(
    shared: &Shared<B>,
    delivery: DeliveryOf<B>,
    queue: &str,
    settlement: Settlement,
) {
    match publish(shared, &delivery, queue, &settlement).await {
        Ok(()) => match delivery.ack().await {
            Ok(()) => log_settled(&settlement),
            Err(err) => warn!(error = %err, "ack failed; the broker will redeliver the job"),
        },
        Err(err) => {
            error!(error = %err, ?settlement, "publish failed; requeueing the delivery");
            if let Err(err) = delivery.requeue().await {
                warn!(error = %err, "requeue failed; the broker will redeliver the job");
            }
        }
    }
}

async fn publish<B: Backend>(
    shared: &Shared<B>,
    delivery: &DeliveryOf<B>,
    queue: &str,
    settlement: &Settlement,
) -> Result<(), BrokerError> {
    match settlement {
        Settlement::Ack { follow_ups } => {
            for (envelope, delay) in follow_ups {
                shared.backend.publish(envelope, *delay).await?;
            }
            Ok(())
        }
        Settlement::Republish { next, delay } => shared.backend.publish(next, Some(*delay)).await,
        Settlement::DeadLetter { reason, attempts } => {
            let letter = DeadLetterOut {
                queue,
                body: delivery.body(),
                reason,
                attempts: *attempts,
            };
            shared.backend.dead_letter(letter).await
        }
    }
}

/// Give each follow-up its envelope; a follow-up of a job type nobody serves fails the
/// attempt retryably, because publishing it would only move the problem to a dead letter.
fn route_follow_ups<B: Backend>(
    shared: &Shared<B>,
    registry: &Registry,
    parent: &Envelope,
    follow_ups: Vec<FollowUp>,
) -> Result<Vec<(Envelope, Option<Duration>)>, JobError> {
    follow_ups
        .into_iter()
        .map(|follow_up| {
            let route = registry.route(&follow_up.job_type).ok_or_else(|| {
                JobError::retryable(format!(
                    "follow-up job type `{}` has no handler",
                    follow_up.job_type
                ))
            })?;
            let mut envelope = Envelope::new(
                follow_up.job_type,
                route.queue.name.clone(),
                follow_up.payload,
            );
            envelope.job_id = follow_up.job_id;
            envelope.correlation_id.clone_from(&parent.correlation_id);
            let delay = follow_up
                .delay
                .map(|delay| shared.config.retry_granularity.round(delay));
            Ok((envelope, delay))
        })
        .collect()
}

fn log_settled(settlement: &Settlement) {
    match settlement {
        Settlement::Ack { follow_ups } => info!(follow_ups = follow_ups.len(), "job completed"),
        Settlement::Republish { .. } => debug!("job republished"),
        Settlement::DeadLetter { reason, .. } => warn!(%reason, "job dead-lettered"),
    }
}
