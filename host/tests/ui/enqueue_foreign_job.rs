use jobhost::broker::MemoryBackend;
use jobhost::producer::Producer;
use jobhost_sdk::{Job, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum ShopQueues {
    Orders,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum MailQueues {
    Emails,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = MailQueues::Emails)]
struct SendEmail {
    to: String,
}

async fn send(producer: &Producer<ShopQueues, MemoryBackend>) {
    let _ = producer.enqueue(&SendEmail { to: "a@b.c".into() }).await;
}

fn main() {
    let _ = send;
}
