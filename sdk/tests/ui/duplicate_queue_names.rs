use jobhost_sdk::Queues;

#[derive(Queues)]
#[queues(prefix = "myapp")]
enum AppQueues {
    Images,
    #[queue(name = "myapp.images")]
    Thumbnails,
}

fn main() {}
