use jobhost_sdk::{Job, Queues};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Images,
}

#[derive(Job)]
#[job(
    queue = AppQueues::Images,
    retry(max_attempts = 0, backoff = "fixed"),
    timeout = "0",
    nmae = "resize"
)]
struct ResizeImage {
    path: String,
}

fn main() {}
