//! Test plugin for `jobhost-bench wait`: `wait.Get` `{"url": "http://host:port/path"}` on
//! queue `bench.wait.get` (prefetch 1,000) GETs the URL through the SDK's client, reads the
//! answer and completes on a 2xx: a job that mostly waits. `wait.Fast`, the same on its
//! own queue `bench.wait.fast` (prefetch 16), is the fast job whose start latency the bench
//! measures beside a saturated `bench.wait.get` (its server answers it at once).
//!
//! With feature `wide` (fixture `wait-wide`) the slow queue's prefetch is 10,000, so a host
//! with `--concurrency 10000` can keep that many waiting. The origin must be granted.

use jobhost_sdk::{Job, JobContext, JobError, Queues, http};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "bench.wait")]
enum WaitQueues {
    #[cfg_attr(not(feature = "wide"), queue(prefetch = 1000))]
    #[cfg_attr(feature = "wide", queue(prefetch = 10000))]
    Get,
    #[queue(prefetch = 16)]
    Fast,
}

/// A `GET` of `url` that waits for its answer.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "wait.Get", queue = WaitQueues::Get)]
struct Get {
    url: String,
}

/// A `GET` of `url` answered at once, on a queue of its own.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "wait.Fast", queue = WaitQueues::Fast)]
struct Fast {
    url: String,
}

fn get(job: Get, _ctx: &JobContext) -> Result<(), JobError> {
    http::get(job.url).send()?.job_result()
}

fn fast(job: Fast, _ctx: &JobContext) -> Result<(), JobError> {
    http::get(job.url).send()?.job_result()
}

jobhost_sdk::plugin!(queues = WaitQueues, jobs = { Get => get, Fast => fast });
