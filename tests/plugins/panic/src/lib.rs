//! Test plugin: `panic.Panic` on queue `test.panic` panics with [`MESSAGE`], so tests can
//! assert that a guest panic reaches the host as its own message, not as a bare trap.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

/// The panic message the host must report.
const MESSAGE: &str = "boom: the handler panicked on purpose";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum PanicQueues {
    Panic,
}

/// Panics.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "panic.Panic", queue = PanicQueues::Panic)]
struct Panic {}

fn panic(_job: Panic, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("about to panic");
    panic!("{MESSAGE}");
}

jobhost_sdk::plugin!(queues = PanicQueues, jobs = { Panic => panic });
