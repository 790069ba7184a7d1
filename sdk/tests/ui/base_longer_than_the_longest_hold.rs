use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(base = "25d", max = "24d"))]
    Images,
}

fn main() {}
