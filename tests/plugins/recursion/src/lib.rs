//! Test plugin: `recursion.Recurse` on queue `test.recursion` recurses until the stack
//! overflows, so tests can assert that a stack overflow traps one attempt and nothing more.

use std::hint::black_box;

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum RecursionQueues {
    Recursion,
}

/// Recurses without bound.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "recursion.Recurse", queue = RecursionQueues::Recursion)]
struct Recurse {}

/// Returns only at depth `u64::MAX`, far beyond any stack. Each frame keeps a buffer alive
/// across the call, so the optimizer can neither turn the recursion into a loop nor shrink
/// the frames.
fn depth(level: u64) -> u64 {
    if black_box(level) == u64::MAX {
        return level;
    }
    let frame = black_box([level; 32]);
    black_box(depth(level + 1)) + frame[0]
}

fn recurse(_job: Recurse, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("recursing without bound");
    let reached = depth(0);
    Err(JobError::fatal(format!(
        "the recursion ended at depth {reached}"
    )))
}

jobhost_sdk::plugin!(queues = RecursionQueues, jobs = { Recurse => recurse });
