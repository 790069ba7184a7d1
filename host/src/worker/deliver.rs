//! The per-delivery algorithm (docs/architecture.md, "Per-delivery flow").
//!
//! 0. A redelivered message that this worker failed to settle before waits a backoff; one
//!    that failed to settle [`WorkerConfig::max_redeliveries`](super::WorkerConfig) times
//!    is dead-lettered as poison without running.
//! 1. Decode the envelope; a body that is not one is dead-lettered raw as
//!    `malformed envelope`. A job whose deadline (`expires_at_ms`) the host's wall clock
//!    has reached is settled as expired without running: its message goes to the
//!    dead-letter queue with the expiry as its reason, whatever else is wrong with it.
//! 2. Refuse a payload above the size limit; find the route of its job type in the registry
//!    of *now*; none is dead-lettered as ``no handler for job type `X` ``.
//! 3. Resolve the effective policy and timeout now. A job an operator cancelled is
//!    settled as cancelled here, without running (see [`fleet`](super::fleet)).
//!    3a. Take a permit of each concurrency cap of the job ([`caps`](super::caps)); a cap
//!    without a free permit puts the job back, unchanged, for one granularity step,
//!    without running it or spending an attempt.
//!    3b. Then take a token of each rate limit of the job ([`rates`](super::rates)); a
//!    limit without a token due gives the permits back and puts the job back, unchanged,
//!    for the time a token takes to come, rounded up to the granularity.
//! 4. Run the handler; a cancellation while it runs drops the attempt at once (and with
//!    it the instance) and settles it as cancelled, without a retry.
//! 5. Ask [`policy::decide`](crate::policy::decide) what becomes of the attempt (ack after
//!    publishing follow-ups, retry or defer through a hold queue, or dead-letter with a
//!    [`DeadCause`]), then settle it (see [`settle`](super::settle)). A retry or deferral
//!    whose hold would end at or after the job's deadline is settled as expired at once,
//!    instead of holding a job that can only expire in a hold queue. A deferral a called
//!    service asked for (`Retry-After`) first holds its key's rate limit back as long,
//!    where the job type's limit respects it ([`rates::hold_back`]).
//!
//! Expiry reads the host's wall clock, against a deadline the producer computed on its
//! own: a producer clock ahead of the host's gives its jobs that much longer, one behind,
//! that much less (`crate::job::Deadline`).
//!
//! Where a job comes back: retries and deferrals go to the queue its job type's route
//! declares, whatever queue the envelope names (the envelope is rewritten to name it), so
//! a message cannot send its retries to a queue of its choosing. Dead letters go to the
//! dead-letter queue of the queue the message was consumed from, where an operator looks.
//!
//! Each delivery runs in a `job` span (debug level, so free at the default level) with the
//! job's id, type, attempt, serving plugin (`name@version`), and its trace: `trace_id`,
//! `span_id` (this attempt's own), `parent_id` (the sender's, from `traceparent`) and
//! `sampled`; the `otlp` feature exports it (`trace::otlp`). The
//! lines an operator sees at info (retries, deferrals, dead letters) and the guest's own
//! lines carry `trace_id` and `span_id` themselves. What the delivery publishes carries
//! its trace context by [`crate::trace`]'s rules: follow-ups as children of the attempt,
//! retries, deferrals and dead letters the context it came with.
//!
//! Every settlement that publishes does so before it acks (see [`settle`](super::settle)):
//! a publish that can never succeed turns the settlement into a dead letter naming the
//! cause; any other failure leaves the delivery to the broker, which redelivers it, and
//! step 0 keeps that from becoming a hot loop.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use jobhost_sdk::JobError;
use tracing::{Instrument, Span, debug_span, field, info, warn};

use super::Shared;
use super::caps::{self, Admission};
use super::observe::Observation;
use super::rates;
use super::registry::{Registry, Route};
use super::settle::{DeliveryOf, Settlement, Settling};
use super::unsettled::{MessageKey, Unsettled};
use uuid::Uuid;

use crate::broker::{Backend, BatchRecord, Delivery, Opened};
use crate::envelope::Envelope;
use crate::job::{
    DeadCause, Delayed, FollowUp, Invocation, Joins, Outcome, Record, Start, now_ms, now_plus,
};
use crate::policy::{Decision, DelayTooLong, HoldDelay, decide, effective_timeout};
use crate::producer::EnqueueOptions;
use crate::text::{NAME_MAX, REASON_MAX, bounded};
use crate::trace::{DeliveryTrace, JobTrace, TraceId};

/// Handle one delivery from `queue`, from start to settlement.
pub(super) async fn deliver<B: Backend>(
    shared: Arc<Shared<B>>,
    queue: Arc<str>,
    delivery: DeliveryOf<B>,
) {
    let mut seen = Observation::start(&shared.config.telemetry, &queue, delivery.redelivered());
    // Before anything can dead-letter the message, so even a poison or malformed message's
    // dead letter carries the trace it came with.
    let trace = DeliveryTrace::start(delivery.trace_context());
    // Only a redelivery can have failures counted, so only a redelivery pays for hashing
    // its body up front.
    let key = delivery
        .redelivered()
        .then(|| MessageKey::of(&queue, delivery.body()));
    let failures = key.map_or(0, |key| shared.unsettled.failures(key));
    if failures > 0 {
        tokio::time::sleep(Unsettled::backoff(failures)).await;
    }
    if failures >= shared.config.max_redeliveries {
        let cause = DeadCause::Poison {
            deliveries: failures.saturating_add(1),
        };
        let attempts = Envelope::decode(delivery.body()).map_or(0, |e| e.attempt);
        let settlement = Settlement::dead_letter(cause, attempts);
        let settling = Settling::new(&shared, &queue, &trace, &seen);
        settling.settle(delivery, key, None, settlement).await;
        return;
    }
    let mut envelope = match Envelope::decode(delivery.body()) {
        Ok(envelope) => envelope,
        Err(err) => {
            let error = bounded(&err.to_string(), REASON_MAX).into_owned();
            let trace_id = trace.job.trace_id;
            warn!(%queue, %error, %trace_id, "dead-lettering a message that is not an envelope");
            let settlement = Settlement::dead_letter(DeadCause::Malformed, 0);
            let settling = Settling::new(&shared, &queue, &trace, &seen);
            settling.settle(delivery, key, None, settlement).await;
            return;
        }
    };
    // Retries and deferrals are made from the envelope, so they carry this.
    envelope.trace = Some(trace.carried.clone());
    let span = job_span(&envelope, trace.job);
    async {
        let settlement = run(&shared, &envelope, &trace, &span, &mut seen).await;
        let settling = Settling::new(&shared, &queue, &trace, &seen);
        settling
            .settle(delivery, key, Some(&envelope), settlement)
            .await;
    }
    .instrument(span.clone())
    .await;
}

/// The span a job's delivery runs in. A debug span: at the default level it costs nothing
/// per job, and the events that an operator sees at info (retries, deferrals, dead
/// letters) carry the job's fields themselves.
fn job_span(envelope: &Envelope, trace: JobTrace) -> Span {
    let span = debug_span!(
        "job",
        job_id = %envelope.job_id,
        job_type = %bounded(&envelope.job_type, NAME_MAX),
        attempt = envelope.attempt,
        plugin = field::Empty,
        trace_id = %trace.trace_id,
        span_id = %trace.span_id,
        parent_id = field::Empty,
        sampled = trace.sampled(),
    );
    if let Some(parent_id) = trace.parent_id {
        span.record("parent_id", field::display(parent_id));
    }
    span
}

async fn run<B: Backend>(
    shared: &Shared<B>,
    envelope: &Envelope,
    trace: &DeliveryTrace,
    span: &Span,
    seen: &mut Observation<'_>,
) -> Settlement {
    let registry = shared.plugins.current();
    if let Some(deadline) = envelope.expires_at_ms
        && let Err(expired) = deadline.check(now_ms(), || Start::Delivery)
    {
        // Counted under its job type when a plugin serves it, because which job type
        // expires is what an operator asks first.
        if let Some(route) = registry.route(&envelope.job_type) {
            seen.counts_under(route);
        }
        return Settlement::expire(expired, envelope.attempt);
    }
    let size = envelope.payload.get().len();
    if size > shared.config.max_payload_bytes {
        let limit = shared.config.max_payload_bytes;
        let cause = DeadCause::PayloadTooLarge { size, limit };
        return Settlement::dead_letter(cause, envelope.attempt);
    }
    let Some(route) = registry.route(&envelope.job_type).cloned() else {
        let job_type = bounded(&envelope.job_type, NAME_MAX).into_owned();
        return Settlement::dead_letter(DeadCause::NoHandler { job_type }, envelope.attempt);
    };
    seen.counts_under(&route);
    let mut running = match shared.config.fleet.start(envelope.job_id) {
        Ok(running) => running,
        Err(cancellation) => return Settlement::cancelled(cancellation, envelope.attempt),
    };
    span.record("plugin", &*route.plugin);
    let leases = match caps::admit(shared, &route, envelope).await {
        Admission::Admitted(leases) => leases,
        Admission::Throttled { throttle, delay } => {
            return Settlement::Throttled {
                next: envelope.clone().routed_to(&route.queue.name),
                delay,
                throttle,
            };
        }
    };
    let handled = invoke(shared, &route, envelope, trace.job);
    // Dropping the handler's future drops its instance wherever the guest is, because it
    // yields to the runtime at every epoch tick. A cancelled attempt's permits go back as
    // `leases` drops on the way out.
    let outcome = tokio::select! {
        biased;
        cancellation = running.cancelled() => {
            return Settlement::cancelled(cancellation, envelope.attempt);
        }
        outcome = seen.handler(handled) => outcome,
    };
    drop(leases);
    let (policy, attempt) = (route.policy(), envelope.attempt);
    let granularity = shared.config.retry_granularity;
    let decision = match decide(policy, attempt, outcome, granularity) {
        Decision::Complete { follow_ups } => {
            match route_follow_ups(shared, &registry, envelope, trace, follow_ups) {
                Ok((follow_ups, batches)) => {
                    return Settlement::Ack {
                        follow_ups,
                        batches,
                    };
                }
                Err(Unroutable::Refused(failure)) => {
                    decide(policy, attempt, Outcome::Failed(failure), granularity)
                }
                Err(Unroutable::DelayTooLong(too_long)) => {
                    Decision::DeadLetter(DeadCause::DelayTooLong {
                        of: Delayed::FollowUp,
                        too_long,
                    })
                }
            }
        }
        decision => decision,
    };
    if let Decision::Defer {
        delay,
        retry_after: true,
        ..
    } = &decision
    {
        rates::hold_back(shared, &route, envelope, delay.get()).await;
    }
    settlement(&route, envelope, trace.job.trace_id, decision)
}

/// Run the handler; a panic in host code costs this attempt, not the worker, and the
/// delivery is still settled.
async fn invoke<B: Backend>(
    shared: &Shared<B>,
    route: &Route,
    envelope: &Envelope,
    trace: JobTrace,
) -> Outcome {
    let job = Invocation {
        job_id: envelope.job_id,
        job_type: &envelope.job_type,
        queue: &route.queue.name,
        attempt: envelope.attempt,
        max_attempts: route.policy().max_attempts,
        deferrals: envelope.deferrals,
        priority: envelope.priority,
        age: envelope.age(),
        payload: envelope.payload.get().as_bytes(),
        batch: envelope.batch,
        trace,
        timeout: shared.config.attempt_timeout(effective_timeout(
            &route.job,
            &route.queue,
            shared.config.default_timeout,
        )),
        record: record(shared, route),
    };
    // The call sits inside the async block so that a panic while building the future is
    // caught as well as one while polling it.
    let run = async { route.handler.invoke(job).await };
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => Outcome::Crashed(format!("the handler panicked: {}", panic_message(&*panic))),
    }
}

/// Whether the attempt is recorded (docs/replay.md): on a host with a recorder, unless the
/// grants file turns the queue's recording off; a completed attempt keeps its recording at
/// the queue's sampled rate.
fn record<'a, B: Backend>(shared: &'a Shared<B>, route: &Route) -> Option<Record<'a>> {
    let to = shared.config.recorder.as_deref()?;
    let grants = shared.config.caps.current();
    let queue = &route.queue.name;
    grants.records(queue).then(|| Record {
        to,
        completed: rand::random_bool(grants.completed_sampled(queue)),
    })
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// What the worker does with the policy's [`Decision`]: the envelope it publishes, and the
/// line an operator sees at info for a retry or a deferral.
fn settlement(
    route: &Route,
    envelope: &Envelope,
    trace_id: TraceId,
    decision: Decision,
) -> Settlement {
    let job_type = bounded(&envelope.job_type, NAME_MAX);
    match decision {
        Decision::Complete { .. } => Settlement::Ack {
            follow_ups: Vec::new(),
            batches: Vec::new(),
        },
        Decision::Defer { delay, reason, .. } => {
            if let Some(expired) = expires_while_held(envelope, delay, || Start::Deferral) {
                return expired;
            }
            info!(
                job_id = %envelope.job_id,
                %job_type,
                attempt = envelope.attempt,
                %trace_id,
                reason = %bounded(&reason, REASON_MAX),
                delay = ?delay.get(),
                "job deferred"
            );
            Settlement::Defer {
                next: envelope
                    .deferred(route.queue.max_priority)
                    .routed_to(&route.queue.name),
                delay,
            }
        }
        Decision::Retry { delay, failure } => {
            let error = bounded(&failure.to_string(), REASON_MAX).into_owned();
            let retry = || Start::Retry {
                failure: error.clone(),
            };
            if let Some(expired) = expires_while_held(envelope, delay, retry) {
                return expired;
            }
            info!(
                job_id = %envelope.job_id,
                %job_type,
                attempt = envelope.attempt,
                %trace_id,
                %error,
                retry_in = ?delay.get(),
                "job failed, retrying"
            );
            Settlement::Retry {
                next: envelope.next_attempt().routed_to(&route.queue.name),
                delay,
            }
        }
        Decision::DeadLetter(cause) => Settlement::dead_letter(cause, envelope.attempt),
    }
}

/// The settlement of a job whose retry or deferral, held for `delay` from now, would come
/// back at or after its deadline: expired now, rather than held until it can only expire.
fn expires_while_held(
    envelope: &Envelope,
    delay: HoldDelay,
    start: impl FnOnce() -> Start,
) -> Option<Settlement> {
    let deadline = envelope.expires_at_ms?;
    let expired = deadline.check(now_plus(delay.get()), start).err()?;
    Some(Settlement::expire(expired, envelope.attempt))
}

/// Why the follow-ups of a completed attempt cannot be published.
enum Unroutable {
    /// A follow-up names a job type nobody serves, and the attempt fails retryably, because
    /// publishing it would only move the problem to a dead letter (and a plugin serving it
    /// may be loaded by the next attempt); or its declared unique key is out of range, and
    /// the attempt fails for good.
    Refused(JobError),
    /// A follow-up's delay is longer than any hold queue holds: no attempt can do better.
    DelayTooLong(DelayTooLong),
}

/// Give each follow-up its envelope, and each batch the handler opened or added to its
/// record (published before its members), or say why they cannot all be published.
fn route_follow_ups<B: Backend>(
    shared: &Shared<B>,
    registry: &Registry,
    parent: &Envelope,
    trace: &DeliveryTrace,
    follow_ups: Vec<FollowUp>,
) -> Result<Routed, Unroutable> {
    let batches = batch_records(registry, parent, &follow_ups)?;
    let envelopes = follow_ups
        .into_iter()
        .map(|follow_up| {
            let route = registry.route(&follow_up.job_type).ok_or_else(|| {
                Unroutable::Refused(JobError::retryable(format!(
                    "follow-up job type `{}` has no handler",
                    bounded(&follow_up.job_type, NAME_MAX)
                )))
            })?;
            let delay = follow_up
                .delay
                .map(|delay| shared.config.retry_granularity.round(delay))
                .transpose()
                .map_err(Unroutable::DelayTooLong)?;
            let mut envelope = Envelope::new(
                follow_up.job_type,
                route.queue.name.clone(),
                follow_up.payload,
            );
            envelope.job_id = follow_up.job_id;
            envelope.correlation_id.clone_from(&parent.correlation_id);
            envelope.trace = Some(trace.follow_up());
            envelope.batch = follow_up.batch.as_deref().map(Joins::batch);
            // Unique as its job type declares, as an enqueue through the host would be; a
            // batch's members are the batch's own, and take no lock, as through the API.
            if envelope.batch.is_none() {
                let declared = route.job_limits.unique.as_ref();
                let options = EnqueueOptions::new().unique_as_declared(declared, &envelope.payload);
                let lock = options.unique_lock(&envelope.job_type).map_err(|error| {
                    let job_type = bounded(&envelope.job_type, NAME_MAX);
                    Unroutable::Refused(JobError::fatal(format!("follow-up `{job_type}`: {error}")))
                })?;
                envelope.unique_lock = lock.map(|lock| lock.name().to_owned());
            }
            Ok((envelope, delay))
        })
        .collect::<Result<_, _>>()?;
    Ok((envelopes, batches))
}

/// The follow-ups' envelopes, and the batch records published before them.
type Routed = (Vec<(Envelope, Option<HoldDelay>)>, Vec<BatchRecord>);

/// One record per batch the follow-ups join, in the order each first appears: an opening
/// (its callbacks' job types routed, as its members' are) or an add by `parent`.
fn batch_records(
    registry: &Registry,
    parent: &Envelope,
    follow_ups: &[FollowUp],
) -> Result<Vec<BatchRecord>, Unroutable> {
    let mut groups: Vec<(&Arc<Joins>, Vec<Uuid>)> = Vec::new();
    for follow_up in follow_ups {
        let Some(joins) = &follow_up.batch else {
            continue;
        };
        match groups
            .iter_mut()
            .find(|(group, _)| Arc::ptr_eq(group, joins))
        {
            Some((_, members)) => members.push(follow_up.job_id),
            None => groups.push((joins, vec![follow_up.job_id])),
        }
    }
    groups
        .into_iter()
        .map(|(joins, members)| {
            let record = match &**joins {
                Joins::Opened {
                    batch,
                    callbacks,
                    context,
                } => {
                    if let Some((_, job_type)) = callbacks
                        .each()
                        .find(|(_, job_type)| registry.route(job_type).is_none())
                    {
                        return Err(Unroutable::Refused(JobError::retryable(format!(
                            "batch callback job type `{}` has no handler",
                            bounded(job_type, NAME_MAX)
                        ))));
                    }
                    BatchRecord::Open(Opened {
                        batch: *batch,
                        members,
                        callbacks: callbacks.clone(),
                        context: context.clone(),
                        at_ms: now_ms(),
                    })
                }
                Joins::Parent { batch } => BatchRecord::Add {
                    batch: *batch,
                    by: parent.job_id,
                    members,
                },
            };
            record
                .check()
                .map_err(|bad| Unroutable::Refused(JobError::fatal(bad.to_string())))?;
            Ok(record)
        })
        .collect()
}
