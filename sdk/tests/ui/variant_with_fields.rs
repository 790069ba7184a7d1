use jobhost_sdk::Queues;

#[derive(Queues)]
enum AppQueues {
    Images(u32),
    Emails { to: String },
}

fn main() {}
