use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(max_priority = 256)]
    Images,
}

fn main() {}
