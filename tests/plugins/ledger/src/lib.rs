//! Test plugin: a ledger of completed jobs kept in the broker, for fault tests whose host
//! runs in another process (and may be killed).
//!
//! - `ledger.Work {id, fail_times, defer_times}` on `test.ledger.work` (5 attempts, fixed
//!   1s): defers itself for 1s while it has been deferred fewer than `defer_times` times,
//!   fails retryably while `attempt <= fail_times`, then enqueues `ledger.Done {id}`. A
//!   job with `fail_times >= 5` is dead-lettered by its policy after its fifth attempt.
//! - `ledger.Done {id}` on `test.ledger.done`: always fatal, so every record ends in
//!   `test.ledger.done.dead`, where the test reads it.
//!
//! - `ledger.Fan {ids, nested}` on `test.ledger.work`: enqueues one `ledger.Work` per id
//!   as a batch whose `on_success` and `on_complete` are `ledger.Gathered`; the first
//!   member adds a `ledger.Work` per id of `nested` to the batch before it completes.
//! - `ledger.Tick {id}` on `test.ledger.work`: completes at once and records nothing, for
//!   tests that count what the host says of many jobs (a batch's members).
//! - `ledger.Gathered` on `test.ledger.done`: a batch's callback, fatal like `Done`, so it
//!   lands beside the records, its payload the batch's.
//!
//! Follow-ups are published before the `Work` delivery is acked, so a host killed between
//! the two records a job twice, never zero times: the ledger may show duplicates, never
//! a completed job without its record.
//!
//! With feature `quorum` (fixture `ledger-quorum`) the same queues are quorum queues named
//! `test.qledger.work` and `test.qledger.done`.

use jobhost_sdk::batch::{Batch, BatchCallback};
use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[cfg_attr(not(feature = "quorum"), queues(prefix = "test.ledger"))]
#[cfg_attr(feature = "quorum", queues(prefix = "test.qledger"))]
enum LedgerQueues {
    #[queue(retry(max_attempts = 5, backoff = "fixed", delay = "1s"))]
    #[cfg_attr(feature = "quorum", queue(queue_type = "quorum"))]
    Work,
    #[cfg_attr(feature = "quorum", queue(queue_type = "quorum"))]
    Done,
}

/// A job that fails its first `fail_times` attempts, then records `id` as done.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Work", queue = LedgerQueues::Work)]
struct Work {
    id: u64,
    #[serde(default)]
    fail_times: u32,
    #[serde(default)]
    defer_times: u32,
    /// Ids of jobs this one adds to its batch before it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    add: Vec<u64>,
}

/// A fan-out: a batch of `Work`, gathered by `Gathered`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Fan", queue = LedgerQueues::Work)]
struct Fan {
    ids: Vec<u64>,
    #[serde(default)]
    nested: Vec<u64>,
}

/// A job that completes and records nothing.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Tick", queue = LedgerQueues::Work)]
struct Tick {
    id: u64,
}

/// What a fan's batch hands its callbacks.
#[derive(Debug, Serialize)]
struct FanContext {
    fan: usize,
}

/// A batch's callback.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Gathered", queue = LedgerQueues::Done)]
struct Gathered(BatchCallback);

/// The record of a completed `Work`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "ledger.Done", queue = LedgerQueues::Done)]
struct Done {
    id: u64,
}

fn work(job: Work, ctx: &JobContext) -> Result<(), JobError> {
    if ctx.deferrals() < job.defer_times {
        return Err(JobError::deferred(Duration::from_secs(1)));
    }
    if ctx.attempt() <= job.fail_times {
        return Err(JobError::retryable(format!(
            "job {} fails attempt {} on purpose",
            job.id,
            ctx.attempt()
        )));
    }
    if !job.add.is_empty() {
        let added: Vec<Work> = job.add.iter().map(|id| Work::new(*id)).collect();
        ctx.add_to_batch(&added)
            .map_err(|e| JobError::retryable(e.to_string()))?;
    }
    // A refused follow-up must not count as done: retry until the record is accepted.
    ctx.enqueue(&Done { id: job.id })
        .map_err(|e| JobError::retryable(e.to_string()))?;
    Ok(())
}

impl Work {
    fn new(id: u64) -> Self {
        Self {
            id,
            fail_times: 0,
            defer_times: 0,
            add: Vec::new(),
        }
    }
}

fn fan(job: Fan, ctx: &JobContext) -> Result<(), JobError> {
    let mut members = job.ids.iter().map(|id| Work::new(*id));
    let first = members.next().map(|first| Work {
        add: job.nested.clone(),
        ..first
    });
    let batch = first
        .into_iter()
        .chain(members)
        .fold(Batch::new(), |batch, work| batch.job(&work))
        .on_success::<Gathered>()
        .on_complete::<Gathered>()
        .context(&FanContext { fan: job.ids.len() });
    ctx.enqueue_batch(batch)
        .map_err(|e| JobError::fatal(e.to_string()))?;
    Ok(())
}

/// Fatal on purpose: the dead-letter queue is the ledger.
fn done(_job: Done, _ctx: &JobContext) -> Result<(), JobError> {
    Err(JobError::fatal("ledger record"))
}

jobhost_sdk::plugin!(queues = LedgerQueues, jobs = {
    Work => work,
    Done => done,
    Fan => fan,
    Tick => tick,
    Gathered => done_gathering,
});

fn tick(_job: Tick, _ctx: &JobContext) -> Result<(), JobError> {
    Ok(())
}

/// Fatal on purpose, as `done`.
fn done_gathering(_job: Gathered, _ctx: &JobContext) -> Result<(), JobError> {
    Err(JobError::fatal("ledger record"))
}
