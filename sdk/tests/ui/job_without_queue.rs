use jobhost_sdk::{Job, Queues};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Images,
}

#[derive(Job)]
#[job(retry(max_attempts = 5))]
struct ResizeImage {
    path: String,
}

fn main() {}
