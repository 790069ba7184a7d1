//! Test plugin `http-probe`: outbound HTTP through `wasi:http` and config reads through
//! `wasi:config/store`, reporting what the host let through, on queue `test.http_probe`.
//!
//! - `probe.Fetch` `{"url": "http://host:port/path", "follow_redirects": false}` sends a
//!   GET and reads the whole body, counting it without keeping it. It completes with one
//!   follow-up `probe.Report` whose payload is
//!   `{"status": 200, "bytes": n, "body": "<first 256 bytes>", "location": ..}`. A request
//!   the host refuses or that fails (denied origin, body cap, timeout) is a retryable error
//!   carrying the host's `wasi:http` error code and message. With `follow_redirects`, a
//!   3xx with a `Location` is followed (at most 5 times), each hop a new request the host
//!   checks. A `429` with `Retry-After: N` (seconds) defers the job by N seconds.
//! - `probe.Send` `{"method": "PUT", "url": "..", "body": "..", "follow_redirects": 0}`
//!   sends the request through the SDK's client (`jobhost_sdk::http`) and ends as the SDK
//!   makes it end: `?` on the send, then `job_result()`; a 2xx completes with one
//!   `probe.Report` as above.
//! - `probe.Limited` `{"url": "..", "customer": ".."}` sends a GET through the SDK's client
//!   and ends as `job_result()` makes it end (a `429` with `Retry-After` defers for that
//!   long, marked as the service's wait), under limits the plugin declares per
//!   `customer`: 2 at once, 20 a second with a burst of 2, respecting `Retry-After`.
//! - `probe.Config` `{"expect": {"key": "value", ..}}` reads each key and completes if
//!   every value is as expected; otherwise it fails naming the keys that differ, never a
//!   value, so a secret it reads appears in no reason or log.
//!
//! `probe.Fetch` uses the `wasip2` crate's bindings directly, not the SDK's HTTP client, so
//! it shows exactly what the host's `wasi:http` does; `probe.Send` shows what a plugin
//! written on the SDK gets.

use std::collections::BTreeMap;
use std::time::Duration;

use jobhost_sdk::{Job, JobContext, JobError, Queues, http};
use serde::{Deserialize, Serialize};

mod config {
    // The generated import glue is `unsafe` by nature (raw ABI pointers).
    #![allow(unsafe_code)]
    wit_bindgen::generate!({ path: "wit", world: "wasi:config/imports@0.2.0-rc.1" });
    pub(crate) use self::wasi::config::store::get;
}

mod fetch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum ProbeQueues {
    HttpProbe,
}

/// Fetches `url`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "probe.Fetch", queue = ProbeQueues::HttpProbe)]
struct Fetch {
    url: String,
    #[serde(default)]
    follow_redirects: bool,
}

/// What a fetch saw, sent as a follow-up so a test can read it from the outcome.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "probe.Report", queue = ProbeQueues::HttpProbe)]
struct Report {
    status: u16,
    bytes: u64,
    body: String,
    location: Option<String>,
}

/// Sends `body` to `url` with `method` through the SDK.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "probe.Send", queue = ProbeQueues::HttpProbe)]
struct SendRequest {
    method: String,
    url: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    follow_redirects: u32,
}

/// Calls `url` for `customer`, as a plugin calls an API that allows each customer two
/// calls at once and 20 a second, and says when to come back.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "probe.Limited",
    queue = ProbeQueues::HttpProbe,
    concurrency(key = "customer", limit = 2),
    rate(key = "customer", limit = "20/s", burst = 2, respect_retry_after)
)]
struct Limited {
    url: String,
    customer: String,
}

/// Checks config values.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "probe.Config", queue = ProbeQueues::HttpProbe)]
struct Config {
    expect: BTreeMap<String, Option<String>>,
}

/// Redirects followed at most.
const MAX_HOPS: usize = 5;

fn fetch_job(job: Fetch, ctx: &JobContext) -> Result<(), JobError> {
    let mut url = job.url;
    let mut hops = 0;
    let seen = loop {
        let seen = fetch::get(&url).map_err(JobError::retryable)?;
        match (&seen.location, job.follow_redirects) {
            (Some(location), true) if (300..400).contains(&seen.status) && hops < MAX_HOPS => {
                url = location.clone();
                hops += 1;
            }
            _ => break seen,
        }
    };
    if seen.status == 429
        && let Some(seconds) = seen.retry_after
    {
        return Err(JobError::deferred_because(
            Duration::from_secs(seconds),
            format!("429 from `{url}`"),
        ));
    }
    ctx.enqueue(&Report {
        status: seen.status,
        bytes: seen.bytes,
        body: seen.body_start,
        location: seen.location,
    })
    .map_err(|err| JobError::fatal(err.to_string()))?;
    Ok(())
}

fn send_job(job: SendRequest, ctx: &JobContext) -> Result<(), JobError> {
    let method = match job.method.as_str() {
        "GET" => http::Method::Get,
        "POST" => http::Method::Post,
        "PUT" => http::Method::Put,
        other => {
            return Err(JobError::fatal(format!(
                "no method `{other}` in this probe"
            )));
        }
    };
    let response = http::request(method, job.url)
        .body(job.body)
        .follow_redirects(job.follow_redirects)
        .send()?;
    response.job_result()?;
    let body = response.body();
    ctx.enqueue(&Report {
        status: response.status(),
        bytes: body.len() as u64,
        body: String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned(),
        location: response.header("location").map(str::to_owned),
    })
    .map_err(|err| JobError::fatal(err.to_string()))?;
    Ok(())
}

fn limited_job(job: Limited, _ctx: &JobContext) -> Result<(), JobError> {
    http::request(http::Method::Get, job.url)
        .send()?
        .job_result()
}

fn config_job(job: Config, _ctx: &JobContext) -> Result<(), JobError> {
    let differ: Vec<&str> = job
        .expect
        .iter()
        .filter(|(key, expected)| config::get(key).ok().flatten() != **expected)
        .map(|(key, _)| key.as_str())
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(JobError::fatal(format!(
            "config keys not as expected: {}",
            differ.join(", ")
        )))
    }
}

fn report_job(_job: Report, _ctx: &JobContext) -> Result<(), JobError> {
    Ok(())
}

jobhost_sdk::plugin!(
    queues = ProbeQueues,
    jobs = {
        Fetch => fetch_job,
        SendRequest => send_job,
        Limited => limited_job,
        Config => config_job,
        Report => report_job,
    }
);
