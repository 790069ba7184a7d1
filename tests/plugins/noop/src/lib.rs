//! Test plugin: one job, `noop.Noop` on queue `test.noop`, that succeeds without doing
//! anything. The cheapest possible delivery, for measuring the host's own overhead.
//!
//! With feature `wide` (fixture `noop-wide`) the queue is `bench.wide.noop` with prefetch
//! 200: the black-box benchmark runs the `jobhost` binary on it, and a queue's prefetch is
//! set by its plugin, not by the host's command line.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[cfg_attr(not(feature = "wide"), queues(prefix = "test"))]
#[cfg_attr(feature = "wide", queues(prefix = "bench.wide"))]
enum NoopQueues {
    #[cfg_attr(feature = "wide", queue(prefetch = 200))]
    Noop,
}

/// Does nothing.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "noop.Noop", queue = NoopQueues::Noop)]
struct Noop {}

fn noop(_job: Noop, _ctx: &JobContext) -> Result<(), JobError> {
    Ok(())
}

jobhost_sdk::plugin!(queues = NoopQueues, jobs = { Noop => noop });
