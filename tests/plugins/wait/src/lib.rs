//! Test plugin: one job, `wait.Get` `{"url": "http://host:port/path"}` on queue
//! `bench.wait.get` (prefetch 1,000), that GETs the URL through the SDK's client, reads the
//! answer and completes on a 2xx: a job that mostly waits, for `jobhost-bench wait`.
//!
//! With feature `wide` (fixture `wait-wide`) the queue's prefetch is 10,000, so a host
//! with `--concurrency 10000` can keep that many waiting. The origin must be granted.

use jobhost_sdk::{Job, JobContext, JobError, Queues, http};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "bench.wait")]
enum WaitQueues {
    #[cfg_attr(not(feature = "wide"), queue(prefetch = 1000))]
    #[cfg_attr(feature = "wide", queue(prefetch = 10000))]
    Get,
}

/// A `GET` of `url`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "wait.Get", queue = WaitQueues::Get)]
struct Get {
    url: String,
}

fn get(job: Get, _ctx: &JobContext) -> Result<(), JobError> {
    http::get(job.url).send()?.job_result()
}

jobhost_sdk::plugin!(queues = WaitQueues, jobs = { Get => get });
