use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(timeout = "1.5s")]
    Images,
}

fn main() {}
