//! Step 3a of the per-delivery algorithm: the fleet-wide concurrency caps in force, the
//! grants file's or else what the plugin declares (docs/flow-control.md).
//!
//! # Contract
//! - A job runs only while it holds a permit of each cap that applies to it: its job type's
//!   per-key cap (the key read from its payload by [`key_of`]), then its queue's.
//!   The permits are held until the handler returns, and given back before the settlement
//!   publishes, so a slow broker confirm never keeps another job waiting.
//! - A job that finds a cap without a free permit does not run and spends no attempt: the
//!   worker puts it, unchanged, into its queue's hold queue for one step of the retry
//!   granularity ([`Settlement::Throttled`](super::settle::Settlement)), acks the delivery,
//!   and pulls the next one, so a capped key never blocks the other keys behind it.
//! - A broker that fails to answer a take throttles the job the same way (logged at warn):
//!   a cap is never skipped because its state could not be read.
//! - With its permits, a job takes its rate limits' tokens ([`rates`](super::rates)); none
//!   due gives the permits back and holds the job back for the time a token takes to come.

use std::sync::Arc;

use tracing::{debug, warn};

use super::registry::Route;
use super::{Shared, rates};
use crate::broker::{Backend, Permits};
use crate::envelope::Envelope;
use crate::grants::{CapKey, Grants, key_of};
use crate::job::Throttle;
use crate::policy::HoldDelay;
use crate::text::{REASON_MAX, bounded};

/// What the caps and the rate limits say about one job.
pub(super) enum Admission<L> {
    /// It may run, holding these permits until it ends.
    Admitted(Vec<L>),
    /// A cap has no permit free, or a rate limit no token due: the job waits `delay`.
    Throttled {
        throttle: Throttle,
        delay: HoldDelay,
    },
}

/// Take a permit of every cap of `envelope`'s job and then a token of every rate limit, or
/// hold no permit at all.
pub(super) async fn admit<B: Backend>(
    shared: &Shared<B>,
    route: &Route,
    envelope: &Envelope,
) -> Admission<B::Lease> {
    let grants = shared.config.caps.current();
    let wanted = permits(
        &grants,
        route,
        envelope,
        shared.config.broker_consumer_timeout,
    );
    let mut leases = Vec::with_capacity(wanted.len());
    let throttled = Admission::Throttled {
        throttle: Throttle::Concurrency,
        delay: shared.config.retry_granularity.one_step(),
    };
    for permits in &wanted {
        match shared.backend.take_permit(permits).await {
            Ok(Some(lease)) => leases.push(lease),
            Ok(None) => {
                debug!(queue = %route.queue.name, permits = %permits.name, limit = permits.limit, "job throttled: no permit free");
                return throttled;
            }
            Err(err) => {
                let error = bounded(&err.to_string(), REASON_MAX).into_owned();
                warn!(queue = %route.queue.name, permits = %permits.name, %error, "cannot take a permit; the job waits as if throttled");
                return throttled;
            }
        }
    }
    match rates::take(shared, route, envelope).await {
        // Dropping the leases gives the permits back.
        Some(delay) => Admission::Throttled {
            throttle: Throttle::Rate,
            delay,
        },
        None => Admission::Admitted(leases),
    }
}

/// The permits a job of `route` with `envelope` needs, its key's first: the narrower cap
/// refuses first, so a throttled key does not take and give back its queue's permit.
fn permits(
    grants: &Grants,
    route: &Route,
    envelope: &Envelope,
    held_at_most: std::time::Duration,
) -> Vec<Permits> {
    let job_type: &Arc<str> = &route.job_type;
    let key = grants
        .job_concurrency(job_type, &route.job_limits)
        .map(|(cap, _)| {
            let key = match key_of(&cap.key, &envelope.payload) {
                CapKey::Value(text) => Some(text),
                CapKey::Missing => None,
            };
            Permits::for_key(job_type, key.as_deref(), cap.limit, held_at_most)
        });
    let queue = grants
        .queue_concurrency(&route.queue.name, &route.queue_limits)
        .map(|(limit, _)| Permits::for_queue(&route.queue.name, limit, held_at_most));
    key.into_iter().chain(queue).collect()
}
