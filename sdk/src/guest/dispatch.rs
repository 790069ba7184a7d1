//! Running one delivery: decode the payload, call the handler, map its outcome to the WIT.

use super::bindings::jobhost::plugin::types;
use super::millis;
use super::panic::install_panic_hook;
use crate::{Job, JobContext, JobError};

/// One job type of a plugin and how to run a delivery of it ([`run`] with its handler).
pub type Route = (
    &'static str,
    fn(&[u8], &JobContext) -> Result<(), types::JobError>,
);

/// Handles one delivery: runs the route whose name is the context's job type.
///
/// A job type without a route is fatal, since no retry of this plugin will ever handle it.
pub fn handle(
    context: types::JobContext,
    payload: &[u8],
    routes: &[Route],
) -> Result<(), types::JobError> {
    install_panic_hook();
    let ctx = JobContext::new(context);
    match routes.iter().find(|(name, _)| *name == ctx.job_type()) {
        Some((_, run)) => run(payload, &ctx),
        None => Err(types::JobError::Fatal(format!(
            "plugin has no handler for job type `{}` (it handles: {})",
            ctx.job_type(),
            routes
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Decodes `payload` as `J` and runs `handler` on it.
///
/// A payload that does not decode is the WIT `decode` error carrying serde's message, so
/// the host dead-letters it as `decode error: {message}` without retrying.
pub fn run<J: Job>(
    handler: fn(J, &JobContext) -> Result<(), JobError>,
    payload: &[u8],
    ctx: &JobContext,
) -> Result<(), types::JobError> {
    let job: J =
        serde_json::from_slice(payload).map_err(|e| types::JobError::Decode(e.to_string()))?;
    handler(job, ctx).map_err(job_error)
}

/// `error` as the WIT carries it; a `Deferred` built by hand with a delay above
/// [`crate::MAX_DELAY`] is fatal (see [`JobError::checked`]).
fn job_error(error: JobError) -> types::JobError {
    match error.checked() {
        JobError::Retryable(msg) => types::JobError::Retryable(msg),
        JobError::Fatal(msg) => types::JobError::Fatal(msg),
        JobError::Deferred {
            delay,
            reason,
            retry_after,
        } => types::JobError::Deferred(types::Deferral {
            delay: millis(delay),
            reason,
            retry_after,
        }),
    }
}
