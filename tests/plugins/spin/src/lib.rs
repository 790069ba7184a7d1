//! Test plugin: `spin.Spin` on queue `test.spin` loops forever without yielding, so tests
//! can assert that the host's timeout (epoch interruption) stops it and the worker lives on.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum SpinQueues {
    Spin,
}

/// Never returns.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "spin.Spin", queue = SpinQueues::Spin)]
struct Spin {}

fn spin(_job: Spin, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("spinning forever");
    let mut counter = 0u64;
    loop {
        // `black_box` keeps the optimizer from proving the loop side-effect free.
        counter = std::hint::black_box(counter.wrapping_add(1));
    }
}

jobhost_sdk::plugin!(queues = SpinQueues, jobs = { Spin => spin });
