//! Test plugin: `membomb.Allocate` on queue `test.membomb` allocates (and touches) memory
//! one MiB at a time until the allocation fails, so tests can assert that the host's memory
//! cap stops it and costs one attempt, nothing more.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum MembombQueues {
    Membomb,
}

/// Allocates without bound.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "membomb.Allocate", queue = MembombQueues::Membomb)]
struct Allocate {}

const MIB: usize = 1 << 20;

fn allocate(_job: Allocate, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("allocating without bound");
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Filled, not just reserved, so every page is really committed.
        hoard.push(std::hint::black_box(vec![0xA5; MIB]));
    }
}

jobhost_sdk::plugin!(queues = MembombQueues, jobs = { Allocate => allocate });
