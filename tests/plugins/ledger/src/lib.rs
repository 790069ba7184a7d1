//! Test plugin: a ledger of completed jobs kept in the broker, for fault tests whose host
//! runs in another process (and may be killed).
//!
//! - `ledger.Work {id, fail_times}` on `test.ledger.work` (5 attempts, fixed 1s): fails
//!   retryably while `attempt <= fail_times`, then enqueues `ledger.Done {id}`.
//! - `ledger.Done {id}` on `test.ledger.done`: always fatal, so every record ends in
//!   `test.ledger.done.dead`, where the test reads it.
//!
//! Follow-ups are published before the `Work` delivery is acked, so a host killed between
//! the two records a job twice, never zero times: the ledger may show duplicates, never
//! a completed job without its record.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test.ledger")]
enum LedgerQueues {
    #[queue(retry(max_attempts = 5, backoff = "fixed", delay = "1s"))]
    Work,
    Done,
}

/// A job that fails its first `fail_times` attempts, then records `id` as done.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Work", queue = LedgerQueues::Work)]
struct Work {
    id: u64,
    #[serde(default)]
    fail_times: u32,
}

/// The record of a completed `Work`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Done", queue = LedgerQueues::Done)]
struct Done {
    id: u64,
}

fn work(job: Work, ctx: &JobContext) -> Result<(), JobError> {
    if ctx.attempt() <= job.fail_times {
        return Err(JobError::retryable(format!(
            "job {} fails attempt {} on purpose",
            job.id,
            ctx.attempt()
        )));
    }
    // A refused follow-up must not count as done: retry until the record is accepted.
    ctx.enqueue(&Done { id: job.id })
        .map_err(|e| JobError::retryable(e.to_string()))?;
    Ok(())
}

/// Fatal on purpose: the dead-letter queue is the ledger.
fn done(_job: Done, _ctx: &JobContext) -> Result<(), JobError> {
    Err(JobError::fatal("ledger record"))
}

jobhost_sdk::plugin!(queues = LedgerQueues, jobs = { Work => work, Done => done });
