use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(factor = 1e999))]
    Images,
}

fn main() {}
