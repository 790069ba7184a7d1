use jobhost_sdk::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    #[queue(concurrency = 0, rate = "5000/s")]
    Images,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Images, concurrency(key = "customer.id", limit = 2), rate(key = "k", limit = "10/d"))]
struct Resize {
    customer: String,
}

fn main() {}
