use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(max_attempts = 5, delay = "30s"))]
    Images,
}

fn main() {}
