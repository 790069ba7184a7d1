//! A worker stopped in the middle of a backlog on RabbitMQ: the jobs running at the stop
//! finish, every job that finished is acked before the connection closes, though acks go
//! out in batches (`broker/rabbitmq/acks.rs`), and only the jobs never started go back to
//! the queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobhost::broker::Backend;
use jobhost::envelope::Envelope;
use jobhost::job::{Invocation, JobSpec, Manifest, Outcome};
use jobhost::worker::{BoxFuture, Handler, Plugins, Unit, Worker, WorkerConfig};
use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::support::worker::eventually;
use crate::support::{Cleanup, PATIENCE, backend, raw_channel, ready, unique, within};

/// How long each job takes: long enough that the jobs running at the stop finish after
/// the consumer has been cancelled, so the last of them settle just before the channel's
/// last delivery is gone, with a batch of acks not yet full.
const JOB: Duration = Duration::from_millis(300);

/// How many attempts started and how many finished.
#[derive(Default)]
struct Counts {
    started: AtomicUsize,
    finished: AtomicUsize,
}

/// A job that waits [`JOB`], counting its attempts.
struct Slow(Arc<Counts>);

impl Handler for Slow {
    fn invoke<'a>(&'a self, _job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            self.0.started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(JOB).await;
            self.0.finished.fetch_add(1, Ordering::SeqCst);
            Outcome::Completed { follow_ups: vec![] }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_acks_every_job_it_finished_and_hands_back_only_the_rest() {
    const JOBS: usize = 300;
    let Some(backend) = backend(&unique("stop")).await.map(Arc::new) else {
        return;
    };
    let name = unique("stop");
    let _cleanup = Cleanup::new(&[&name]);
    // A quarter of this is a batch of 50 acks; the worker's default concurrency, 64 jobs
    // at once, leaves 14 of the first wave's acks to the batch that never fills.
    let mut queue = QueueConfig::new(&name);
    queue.prefetch = 200;
    backend.declare(&queue).await.expect("declared");
    for _ in 0..JOBS {
        let payload = RawValue::from_string("{}".to_owned()).expect("json");
        let envelope = Envelope::new("stop.Slow", &name, payload);
        backend.publish(&envelope, None).await.expect("published");
    }

    let counts = Arc::new(Counts::default());
    let manifest = Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: "stop".into(),
        queues: vec![queue],
        jobs: vec![JobSpec {
            name: "stop.Slow".into(),
            queue: name.clone(),
            retry: None,
            timeout: None,
        }],
    };
    let plugins = Plugins::new();
    plugins
        .install(Unit::new(
            "stop",
            "native",
            manifest,
            Arc::new(Slow(counts.clone())),
        ))
        .expect("installed");
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(Arc::clone(&backend), plugins, WorkerConfig::default()).run(shutdown.clone()),
    );
    eventually(PATIENCE, "the first jobs to start", || async {
        counts.started.load(Ordering::SeqCst) > 0
    })
    .await;
    shutdown.cancel();
    within(PATIENCE, "the worker to stop", worker)
        .await
        .expect("the worker does not panic");
    backend.close().await;

    let (started, finished) = (
        counts.started.load(Ordering::SeqCst),
        counts.finished.load(Ordering::SeqCst),
    );
    assert_eq!(finished, started, "every job running at the stop finished");
    assert!(
        finished < JOBS,
        "the stop lands mid-backlog: {finished} of {JOBS} ran"
    );
    let channel = raw_channel().await;
    assert_eq!(
        ready(&channel, &name).await as usize,
        JOBS - finished,
        "each of the {finished} finished jobs was acked, and every other job is back in \
         the queue"
    );
}
