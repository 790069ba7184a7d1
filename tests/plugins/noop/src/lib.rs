//! Test plugin: one job, `noop.Noop` on queue `test.noop`, that succeeds without doing
//! anything. The cheapest possible delivery, for measuring the host's own overhead.

use std::time::Duration;

use jobhost_sdk::{Job, JobContext, JobError, QueueConfig, Queues, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NoopQueues {
    Noop,
}

impl Queues for NoopQueues {
    fn all() -> &'static [Self] {
        &[Self::Noop]
    }
    fn name(&self) -> &'static str {
        "test.noop"
    }
    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
    }
}

/// Does nothing.
#[derive(Debug, Serialize, Deserialize)]
struct Noop {}

impl Job for Noop {
    const NAME: &'static str = "noop.Noop";
    type Queues = NoopQueues;
    const QUEUE: NoopQueues = NoopQueues::Noop;
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }
    fn timeout() -> Option<Duration> {
        None
    }
}

fn noop(_job: Noop, _ctx: &JobContext) -> Result<(), JobError> {
    Ok(())
}

jobhost_sdk::plugin!(queues = NoopQueues, jobs = { Noop => noop });
