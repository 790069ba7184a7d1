use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(timeout = "2w")]
    Images,
}

fn main() {}
