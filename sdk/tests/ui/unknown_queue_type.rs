use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(queue_type = "stream")]
    Images,
}

fn main() {}
