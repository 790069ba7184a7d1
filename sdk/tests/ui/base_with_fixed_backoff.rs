use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(backoff = "fixed", delay = "30s", base = "1s"))]
    Images,
}

fn main() {}
