use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(prefech = 4)]
    Images,
}

fn main() {}
