use jobhost_sdk::{Job, Queues};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Images,
}

#[derive(Job)]
#[job(queue = Images)]
struct ResizeImage {
    path: String,
}

fn main() {}
