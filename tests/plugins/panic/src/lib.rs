//! Test plugin: `panic.Panic` on queue `test.panic` panics with [`MESSAGE`], so tests can
//! assert that a guest panic reaches the host as its own message, not as a bare trap.

use std::time::Duration;

use jobhost_sdk::{Job, JobContext, JobError, QueueConfig, Queues, RetryPolicy};
use serde::{Deserialize, Serialize};

/// The panic message the host must report.
const MESSAGE: &str = "boom: the handler panicked on purpose";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PanicQueues {
    Panic,
}

impl Queues for PanicQueues {
    fn all() -> &'static [Self] {
        &[Self::Panic]
    }
    fn name(&self) -> &'static str {
        "test.panic"
    }
    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
    }
}

/// Panics.
#[derive(Debug, Serialize, Deserialize)]
struct Panic {}

impl Job for Panic {
    const NAME: &'static str = "panic.Panic";
    type Queues = PanicQueues;
    const QUEUE: PanicQueues = PanicQueues::Panic;
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }
    fn timeout() -> Option<Duration> {
        None
    }
}

fn panic(_job: Panic, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("about to panic");
    panic!("{MESSAGE}");
}

jobhost_sdk::plugin!(queues = PanicQueues, jobs = { Panic => panic });
