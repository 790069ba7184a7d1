use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(base = "1m", max = "30s"))]
    Images,
}

fn main() {}
