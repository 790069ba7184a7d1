//! Test plugin for recording and replay: `replay.Charge` on queue `test.replayable`, one
//! attempt, no retries.
//!
//! `{"url": "http://host:port", "order": "o-17"}`: logs `charging` with the order, the
//! config value `region`, whether the secret `api_key` is set, a nonce from the guest's
//! randomness and the wall clock's milliseconds; enqueues a `replay.Receipt` and logs its
//! id; then POSTs to `{url}/charge?order={order}` (`{url}/v2/charge?..` when built with
//! `moved`) and ends as the SDK's `job_result()` says, so a `500` is a retryable failure
//! carrying the body.
//!
//! Built with `fixed`, a `500` whose body says `already charged` completes instead: the
//! version that fixes the recorded failure.

use std::hash::BuildHasher as _;
use std::time::{SystemTime, UNIX_EPOCH};

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues, config, http};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum ReplayQueues {
    Replayable,
}

/// Charges `order` at the payment service `url`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "replay.Charge",
    queue = ReplayQueues::Replayable,
    retry(max_attempts = 1)
)]
struct Charge {
    url: String,
    order: String,
}

/// A receipt for a charge; nothing handles it here.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "replay.Receipt", queue = ReplayQueues::Replayable)]
struct Receipt {
    order: String,
}

const PATH: &str = if cfg!(feature = "moved") {
    "/v2/charge"
} else {
    "/charge"
};

fn charge(job: Charge, ctx: &JobContext) -> Result<(), JobError> {
    let region = config::get("region")
        .map_err(|err| JobError::fatal(err.to_string()))?
        .unwrap_or_default();
    let has_key = config::get("api_key")
        .map_err(|err| JobError::fatal(err.to_string()))?
        .is_some();
    let nonce = std::collections::hash_map::RandomState::new().hash_one(&job.order);
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let key = if has_key { "set" } else { "unset" };
    ctx.log(
        Level::Info,
        "charging",
        &[
            ("order", &job.order),
            ("region", &region),
            ("api_key", &key),
            ("nonce", &nonce),
            ("at", &at),
        ],
    );
    let receipt = ctx
        .enqueue(&Receipt {
            order: job.order.clone(),
        })
        .map_err(|err| JobError::fatal(err.to_string()))?;
    ctx.log(Level::Info, "receipt queued", &[("receipt", &receipt)]);
    let url = format!("{}{PATH}?order={}", job.url, job.order);
    let response = http::post(url).body(job.order.clone()).send()?;
    if cfg!(feature = "fixed")
        && response.status() == 500
        && response
            .text()
            .is_ok_and(|body| body.contains("already charged"))
    {
        ctx.log(Level::Info, "already charged", &[("order", &job.order)]);
        return Ok(());
    }
    response.job_result()
}

fn receipt(_job: Receipt, _ctx: &JobContext) -> Result<(), JobError> {
    Ok(())
}

jobhost_sdk::plugin!(queues = ReplayQueues, jobs = { Charge => charge, Receipt => receipt });
