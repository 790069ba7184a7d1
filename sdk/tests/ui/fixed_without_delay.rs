use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(backoff = "fixed"))]
    Images,
}

fn main() {}
