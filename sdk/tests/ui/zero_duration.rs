use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(message_ttl = "0s")]
    Images,
}

fn main() {}
