use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(backoff = "linear"))]
    Images,
}

fn main() {}
