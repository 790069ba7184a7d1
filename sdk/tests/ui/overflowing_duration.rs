use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(message_ttl = "999999999999999d")]
    Images,
}

fn main() {}
