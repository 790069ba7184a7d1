use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    #[queue(retry(factor = 0))]
    Images,
    #[queue(retry(factor = -1.5))]
    Emails,
}

fn main() {}
