use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(backoff = "none", jitter = false))]
    Images,
}

fn main() {}
