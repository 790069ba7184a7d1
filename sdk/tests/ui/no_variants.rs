use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {}

fn main() {}
