use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(max_attempts = 0))]
    Images,
}

fn main() {}
