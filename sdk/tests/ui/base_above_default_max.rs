use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(base = "10m"))]
    Images,
}

fn main() {}
