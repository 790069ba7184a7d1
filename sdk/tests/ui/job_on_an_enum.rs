use jobhost_sdk::{Job, Queues};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    Images,
}

#[derive(Job)]
#[job(queue = AppQueues::Images)]
enum ResizeImage {
    Small,
}

fn main() {}
