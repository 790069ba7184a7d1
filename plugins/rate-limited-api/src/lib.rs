//! Example plugin: `api.CallApi` on queue `examples.api` calls an HTTP API that rate-limits
//! its callers, and defers for exactly as long as the API's `Retry-After` asks.
//!
//! The API's base URL is the config value `api_base` (`[plugins.rate_limited_api.config]`
//! in `jobhost.toml`, the section of its file `rate_limited_api.wasm`), whose origin the
//! operator grants in `allowed_outbound_hosts`; the job names the path.
//! `Response::job_result` decides: a 2xx completes the job, a 429 or 503 with
//! `Retry-After` defers it without spending an attempt (the deferred job comes back at the
//! front of its queue), a 503 without one or another 5xx is retried by the queue's policy,
//! another 4xx is dead-lettered.

use jobhost_sdk::http;
use jobhost_sdk::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "examples")]
enum ApiQueues {
    /// The API allows 10 calls a second from all of us: the whole fleet starts at most 10
    /// of these jobs a second (the operator's grants file may say otherwise).
    #[queue(
        retry(max_attempts = 3, backoff = "fixed", delay = "1s"),
        rate = "10/s"
    )]
    Api,
}

/// A `GET` of `path` on the configured API.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "api.CallApi", queue = ApiQueues::Api)]
struct CallApi {
    /// The path, from `/`, with its query if any.
    path: String,
}

fn call_api(request: CallApi, ctx: &JobContext) -> Result<(), JobError> {
    let base = jobhost_sdk::config::require("api_base")?;
    let url = format!("{}{}", base.trim_end_matches('/'), request.path);
    let response = http::get(url).header("accept", "application/json").send()?;
    response.job_result()?;
    ctx.log(
        Level::Info,
        "api call succeeded",
        &[
            ("path", &request.path),
            ("status", &response.status()),
            ("deferrals", &ctx.deferrals()),
            ("attempt", &ctx.attempt()),
            ("waited_ms", &ctx.age().as_millis()),
        ],
    );
    Ok(())
}

jobhost_sdk::plugin!(queues = ApiQueues, jobs = { CallApi => call_api });

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jobhost_sdk::http::{HttpError, HttpErrorKind, Request, Response};
    use jobhost_sdk::testing::{HandlerRun, TestContext};

    use super::*;

    fn orders() -> CallApi {
        CallApi {
            path: "/v1/orders".to_owned(),
        }
    }

    /// Calls `/v1/orders` on an API answering with `answer`, after `deferrals` deferrals.
    fn call(
        deferrals: u32,
        answer: impl Fn(&Request) -> Result<Response, HttpError> + Send + Sync + 'static,
    ) -> HandlerRun {
        TestContext::new()
            .config("api_base", "http://api.test/")
            .deferrals(deferrals)
            .age(Duration::from_secs(3))
            .respond_with(answer)
            .run(call_api, orders())
    }

    #[test]
    fn a_rate_limited_call_defers_for_exactly_as_long_as_the_api_asked() {
        let run = call(
            0,
            |_| Ok(Response::new(429).with_header("Retry-After", "2")),
        );
        assert_eq!(
            run.result,
            Err(JobError::retry_after(
                Duration::from_secs(2),
                "GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After 2s"
            ))
        );
        assert_eq!(run.requests[0].url(), "http://api.test/v1/orders");
    }

    #[test]
    fn the_call_succeeds_once_the_api_lets_it_through() {
        let run = call(2, |_| Ok(Response::new(200).with_body("{}")));
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.logs[0].message, "api call succeeded");
        assert_eq!(run.logs[0].field("deferrals"), Some("2"));
        assert_eq!(run.logs[0].field("waited_ms"), Some("3000"));
    }

    #[test]
    fn an_api_that_is_down_or_slow_is_retried() {
        let unavailable = call(0, |_| Ok(Response::new(503)));
        assert!(
            matches!(&unavailable.result, Err(JobError::Retryable(msg)) if msg.contains("without a usable Retry-After")),
            "{:?}",
            unavailable.result
        );
        let timed_out = call(0, |_| {
            Err(HttpError::new(HttpErrorKind::Timeout, "timed out"))
        });
        assert_eq!(timed_out.result, Err(JobError::retryable("timed out")));
    }

    #[test]
    fn a_wait_longer_than_the_longest_hold_is_deferred_for_the_longest_hold_and_says_so() {
        let run = call(0, |_| {
            Ok(Response::new(429).with_header("Retry-After", "3000000"))
        });
        assert!(
            matches!(&run.result, Err(JobError::Deferred { delay, reason, retry_after: true })
                if *delay == jobhost_sdk::MAX_DELAY && reason.contains("capped at the longest hold")),
            "{:?}",
            run.result
        );
    }

    #[test]
    fn without_an_api_base_the_job_is_a_dead_letter_naming_the_missing_value() {
        let run = TestContext::new().run(call_api, orders());
        assert!(
            matches!(&run.result, Err(JobError::Fatal(msg)) if msg.contains("`api_base`")),
            "{:?}",
            run.result
        );
    }
}
