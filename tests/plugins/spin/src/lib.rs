//! Test plugin: `spin.Spin` on queue `test.spin` loops forever without yielding, so tests
//! can assert that the host's timeout (epoch interruption) stops it and the worker lives on.

use std::time::Duration;

use jobhost_sdk::{Job, JobContext, JobError, QueueConfig, Queues, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SpinQueues {
    Spin,
}

impl Queues for SpinQueues {
    fn all() -> &'static [Self] {
        &[Self::Spin]
    }
    fn name(&self) -> &'static str {
        "test.spin"
    }
    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
    }
}

/// Never returns.
#[derive(Debug, Serialize, Deserialize)]
struct Spin {}

impl Job for Spin {
    const NAME: &'static str = "spin.Spin";
    type Queues = SpinQueues;
    const QUEUE: SpinQueues = SpinQueues::Spin;
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }
    fn timeout() -> Option<Duration> {
        None
    }
}

fn spin(_job: Spin, ctx: &JobContext) -> Result<(), JobError> {
    ctx.info("spinning forever");
    let mut counter = 0u64;
    loop {
        // `black_box` keeps the optimizer from proving the loop side-effect free.
        counter = std::hint::black_box(counter.wrapping_add(1));
    }
}

jobhost_sdk::plugin!(queues = SpinQueues, jobs = { Spin => spin });
