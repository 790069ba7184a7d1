//! Example plugin: `api.CallApi` on queue `examples.api` calls a pretend rate-limited API.
//!
//! The API answers "429, retry after `retry_after_ms`" until the job has been deferred
//! `deferrals_needed` times, then succeeds. The handler defers for exactly as long as the
//! API asked: a deferral spends no attempt and never consults the retry policy, and the
//! deferred job comes back at the front of its queue.
//!
//! A wait longer than a hold queue can hold ([`jobhost_sdk::MAX_DELAY`], about 24.8 days)
//! is no deferral: `JobError::deferred_because` makes it fatal, so the job is dead-lettered
//! with a reason that says so.

use std::time::Duration;

use jobhost_sdk::prelude::*;
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
        Response::TooManyRequests { retry_after } => Err(JobError::deferred_because(
            retry_after,
            format!(
                "rate limited by `{}`, retry after {}ms",
                request.endpoint,
                retry_after.as_millis()
            ),
        )),
        Response::Ok => {
            ctx.log(
                Level::Info,
                "api call succeeded",
                &[
                    ("endpoint", &request.endpoint),
                    ("deferrals", &ctx.deferrals()),
                    ("waited_ms", &ctx.age().as_millis()),
                ],
            );
            Ok(())
        }
    }
}

jobhost_sdk::plugin!(queues = ApiQueues, jobs = { CallApi => call_api });

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jobhost_sdk::testing::TestContext;

    use super::*;

    fn request(retry_after_ms: u64) -> CallApi {
        CallApi {
            endpoint: "/v1/orders".to_owned(),
            retry_after_ms,
            deferrals_needed: 2,
        }
    }

    #[test]
    fn a_rate_limited_call_defers_for_exactly_as_long_as_the_api_asked() {
        let run = TestContext::new().deferrals(1).run(call_api, request(1500));
        assert_eq!(
            run.result,
            Err(JobError::deferred_because(
                Duration::from_millis(1500),
                "rate limited by `/v1/orders`, retry after 1500ms"
            ))
        );
    }

    #[test]
    fn the_call_succeeds_once_deferred_as_often_as_needed() {
        let run = TestContext::new()
            .deferrals(2)
            .age(Duration::from_secs(3))
            .run(call_api, request(1500));
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.logs[0].field("deferrals"), Some("2"));
        assert_eq!(run.logs[0].field("waited_ms"), Some("3000"));
    }

    #[test]
    fn a_wait_longer_than_the_longest_hold_is_a_dead_letter_that_says_so() {
        let run = TestContext::new().run(call_api, request(3_000_000_000));
        assert_eq!(
            run.result,
            Err(JobError::fatal(
                "the deferral of 3000000s exceeds the longest hold of 2147483.647s \
                 (rate limited by `/v1/orders`, retry after 3000000000ms)"
            )),
            "fatal, so the host dead-letters it instead of deferring it forever"
        );
    }
}
