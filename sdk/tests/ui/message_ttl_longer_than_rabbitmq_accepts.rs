use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(message_ttl = "50d")]
    Archive,
}

fn main() {}
