//! Test plugin: `logspam.Spam` on queue `test.logspam` logs `lines` records through the
//! host and prints as many lines to stdout and to stderr, in a tight loop, so tests can
//! assert that a chatty guest cannot flood or stall the host.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum LogspamQueues {
    Logspam,
}

/// Logs and prints `lines` times each.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "logspam.Spam", queue = LogspamQueues::Logspam)]
struct Spam {
    lines: u64,
}

fn spam(job: Spam, ctx: &JobContext) -> Result<(), JobError> {
    for line in 0..job.lines {
        ctx.info(&format!("log record {line}"));
        println!("stdout line {line}");
        eprintln!("stderr line {line}");
    }
    Ok(())
}

jobhost_sdk::plugin!(queues = LogspamQueues, jobs = { Spam => spam });
