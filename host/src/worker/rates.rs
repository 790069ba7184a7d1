//! Step 3b of the per-delivery algorithm: the fleet-wide rate limits in force, the grants
//! file's or else what the plugin declares (docs/flow-control.md, "Rate limits").
//!
//! # Contract
//! - A job runs only once it has taken a token of each rate limit that applies to it: its
//!   job type's per-key limit (the key read from its payload as a cap reads it), then its
//!   queue's. A token taken is spent, whatever becomes of the job.
//! - Tokens are taken after the caps' permits, so a job waiting for a permit spends no
//!   token; a job that holds its permits but finds no token gives them back.
//! - A job that finds no token due does not run and spends no attempt: the worker puts it,
//!   unchanged, into its queue's hold queue for the time one token takes to come, rounded
//!   up to the retry granularity, so a limited key never blocks the other keys behind it.
//! - A broker that fails to answer a take holds the job back the same way (logged at warn):
//!   a limit is never skipped because its state could not be read.
//! - A job deferred for a called service's `Retry-After`, whose job type's per-key limit
//!   (the grants file's, or else the plugin's) says `respect_retry_after`, holds its key's
//!   tokens back for its deferral: the key's other jobs find none until then, fleet-wide,
//!   instead of each calling the service to hear the same answer. A hold the broker fails
//!   to take is logged at warn; the job is deferred all the same.

use std::time::Duration;

use tracing::{debug, warn};

use super::Shared;
use super::registry::Route;
use crate::broker::{Backend, Tokens};
use crate::envelope::Envelope;
use crate::grants::{CapKey, Grants, KeyRate, key_of};
use crate::policy::HoldDelay;
use crate::text::{REASON_MAX, bounded};

/// Take a token of every rate limit of `envelope`'s job: `None` when it has them all, or
/// how long it waits when one has none due.
pub(super) async fn take<B: Backend>(
    shared: &Shared<B>,
    route: &Route,
    envelope: &Envelope,
) -> Option<HoldDelay> {
    let grants = shared.config.caps.current();
    for tokens in tokens(&grants, route, envelope) {
        let wait = || {
            shared
                .config
                .retry_granularity
                .round(tokens.interval)
                .unwrap_or_else(|_| shared.config.retry_granularity.one_step())
        };
        match shared.backend.take_token(&tokens).await {
            Ok(true) => {}
            Ok(false) => {
                debug!(queue = %route.queue.name, tokens = %tokens.name, "job throttled: no token due");
                return Some(wait());
            }
            Err(err) => {
                let error = bounded(&err.to_string(), REASON_MAX).into_owned();
                warn!(queue = %route.queue.name, tokens = %tokens.name, %error, "cannot take a token; the job waits as if throttled");
                return Some(wait());
            }
        }
    }
    None
}

/// Hold back the tokens of `envelope`'s key for `delay`, when its job type's per-key rate
/// limit respects a service's `Retry-After`.
pub(super) async fn hold_back<B: Backend>(
    shared: &Shared<B>,
    route: &Route,
    envelope: &Envelope,
    delay: Duration,
) {
    let grants = shared.config.caps.current();
    let Some((limit, tokens)) = key_tokens(&grants, route, envelope) else {
        return;
    };
    if !limit.respect_retry_after {
        return;
    }
    match shared.backend.hold_tokens(&tokens, delay).await {
        Ok(()) => {
            debug!(queue = %route.queue.name, tokens = %tokens.name, hold = ?delay, "a service's Retry-After holds the key's tokens back");
        }
        Err(err) => {
            let error = bounded(&err.to_string(), REASON_MAX).into_owned();
            warn!(queue = %route.queue.name, tokens = %tokens.name, %error, "cannot hold a key's tokens back for a Retry-After; its other jobs take tokens at the rate");
        }
    }
}

/// The tokens a job of `route` with `envelope` needs, its key's first: the narrower limit
/// refuses first, so a limited key does not spend its queue's tokens.
fn tokens(grants: &Grants, route: &Route, envelope: &Envelope) -> Vec<Tokens> {
    let key = key_tokens(grants, route, envelope).map(|(_, tokens)| tokens);
    let queue = grants
        .queue_rate(&route.queue.name, &route.queue_limits)
        .map(|(rate, _)| Tokens::for_queue(&route.queue.name, rate.interval(), rate.burst));
    key.into_iter().chain(queue).collect()
}

/// The per-key rate limit of `route`'s job type in force, if any, and the tokens of
/// `envelope`'s key under it.
fn key_tokens<'a>(
    grants: &'a Grants,
    route: &'a Route,
    envelope: &Envelope,
) -> Option<(&'a KeyRate, Tokens)> {
    let job_type = &*route.job_type;
    let (limit, _) = grants.job_rate(job_type, &route.job_limits)?;
    // Without a key field, every job of the type is in the one bucket of jobs without a key.
    let key = limit
        .key
        .as_ref()
        .and_then(|field| match key_of(field, &envelope.payload) {
            CapKey::Value(text) => Some(text),
            CapKey::Missing => None,
        });
    let tokens = Tokens::for_key(
        job_type,
        key.as_deref(),
        limit.rate.interval(),
        limit.rate.burst,
    );
    Some((limit, tokens))
}
