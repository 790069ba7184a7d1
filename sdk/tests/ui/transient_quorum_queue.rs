use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(queue_type = "quorum", durable = false)]
    Images,
}

fn main() {}
