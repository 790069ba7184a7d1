//! Test plugin: one job, `noop.Noop` on queue `test.noop`, that succeeds without doing
//! anything. The cheapest possible delivery, for measuring the host's own overhead.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum NoopQueues {
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
