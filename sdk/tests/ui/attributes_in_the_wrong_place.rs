use jobhost_sdk::Queues;

#[derive(Queues)]
#[queue(prefetch = 4)]
enum AppQueues {
    #[queues(prefix = "myapp")]
    Images,
}

fn main() {}
