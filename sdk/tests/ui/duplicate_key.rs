use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(prefetch = 4, prefetch = 8)]
    Images,
}

fn main() {}
