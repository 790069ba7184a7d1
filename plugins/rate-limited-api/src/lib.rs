//! Example plugin: `api.CallApi` on queue `examples.api` calls a pretend rate-limited API.
//!
//! The API answers "429, retry after `retry_after_ms`" until the job has been deferred
//! `deferrals_needed` times, then succeeds. The handler defers for exactly as long as the
//! API asked: a deferral spends no attempt and never consults the retry policy, and the
//! deferred job comes back at the front of its queue.

use std::time::Duration;

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "examples")]
enum ApiQueues {
    #[queue(retry(max_attempts = 3, backoff = "fixed", delay = "1s"))]
    Api,
}

/// A call to `endpoint`, whose pretend quota is exhausted for `deferrals_needed` tries.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "api.CallApi", queue = ApiQueues::Api)]
struct CallApi {
    endpoint: String,
    retry_after_ms: u64,
    deferrals_needed: u32,
}

/// The pretend API's answer.
enum Response {
    Ok,
    TooManyRequests { retry_after: Duration },
}

/// The pretend API: rate-limited until the caller has waited `deferrals_needed` times.
fn call(request: &CallApi, deferrals: u32) -> Response {
    if deferrals < request.deferrals_needed {
        Response::TooManyRequests {
            retry_after: Duration::from_millis(request.retry_after_ms),
        }
    } else {
        Response::Ok
    }
}

fn call_api(request: CallApi, ctx: &JobContext) -> Result<(), JobError> {
    match call(&request, ctx.deferrals()) {
        Response::TooManyRequests { retry_after } => Err(JobError::deferred_msg(
            retry_after,
            format!(
                "rate limited by `{}`, retry after {}ms",
                request.endpoint,
                retry_after.as_millis()
            ),
        )),
        Response::Ok => {
            let deferrals = ctx.deferrals().to_string();
            let waited = format!("{:?}", ctx.age());
            ctx.log(
                Level::Info,
                "api call succeeded",
                &[
                    ("endpoint", &request.endpoint),
                    ("deferrals", &deferrals),
                    ("waited", &waited),
                ],
            );
            Ok(())
        }
    }
}

jobhost_sdk::plugin!(queues = ApiQueues, jobs = { CallApi => call_api });
