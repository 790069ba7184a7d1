use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues<const N: usize> {
    Images,
}

fn main() {}
