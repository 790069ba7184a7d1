use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(prefetch = 0)]
    Images,
    #[queue(prefetch = 65536)]
    Emails,
}

fn main() {}
