use jobhost_sdk::{Job, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Reports,
}

#[derive(Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Reports, retry(backoff = "fixed", delay = "30d"))]
struct MonthlyReport {}

fn main() {}
