use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(max = "2147483648ms"))]
    Images,
}

fn main() {}
