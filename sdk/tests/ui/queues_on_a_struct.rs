use jobhost_sdk::Queues;

#[derive(Queues)]
struct AppQueues {
    images: u32,
}

fn main() {}
