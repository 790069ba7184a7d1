//! Unique jobs on the real broker: enqueues of one key racing on two connections accept
//! exactly one and name it to the rest; a lock whose host went away ends with its `for`;
//! a hostile key is hashed or refused, and a stranger's message in a lock queue does not
//! keep the key; through a real `jobhost run`, the key is refused while the job waits and
//! free once it completed, on both `jobhost enqueue` paths; and a job whose host is
//! SIGKILLed while it runs keeps its key while another host runs it again, which frees the
//! key when the job completes there, long before its `for`.
//!
//! Every wait is bounded, every name is this run's own, and what a test creates is
//! deleted when it ends (lock queues included).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use jobhost::admin::enqueue;
use jobhost::broker::{Backend, BrokerError, RabbitMqBackend, Taken, UniqueLock};
use jobhost::policy::Granularity;
use jobhost::producer::EnqueueOptions;
use jobhost_sdk::QueueConfig;
use uuid::Uuid;

use crate::support;
use crate::support::cli::{Host, PROCESSING, STARTUP, http_get, jobhost, json_of, logged_id};
use crate::support::probe::{self, FETCH, until};
use crate::support::worker::fixture_queues;
use crate::support::{
    Cleanup, PATIENCE, Vhost, amqp_url, backend, publish_plainly, raw_channel, ready,
    skip_requested, unique,
};

const JOB_TYPE: &str = "unique.Job";
const TEN_MINUTES: Duration = Duration::from_secs(600);

/// Enqueue a `JOB_TYPE` job on `queue` unique by `key` for `for_`, as `jobhost enqueue
/// --amqp` does.
async fn enqueue_unique(
    backend: &RabbitMqBackend,
    queue: &QueueConfig,
    key: &str,
    for_: Duration,
) -> Result<Uuid, BrokerError> {
    let options = EnqueueOptions::new().unique(key, for_);
    let payload = serde_json::json!({ "key": key });
    enqueue(
        backend,
        queue,
        JOB_TYPE,
        &payload,
        options,
        Granularity::default(),
    )
    .await
    .map(|enqueued| enqueued.job_id)
}

/// The lock of `key` for `for_` among `job_type`'s jobs, and a guard that deletes its
/// queues and `queue` (with its dead-letter queue) when the test ends.
fn lock_of(job_type: &str, key: &str, for_: Duration, queue: &str) -> (UniqueLock, Cleanup) {
    let lock = UniqueLock::new(job_type, key, for_).expect("valid");
    let holder_queue = format!("{}.holder", lock.name());
    let cleanup = Cleanup::new(&[queue, lock.name(), &holder_queue]);
    (lock, cleanup)
}

/// Two backends on connections of their own, as two hosts have; `None` when the broker
/// tests are skipped.
async fn two_backends(what: &str) -> Option<(RabbitMqBackend, RabbitMqBackend)> {
    let one = backend(&unique(&format!("{what}-1"))).await?;
    let two = backend(&unique(&format!("{what}-2"))).await?;
    Some((one, two))
}

/// The holder a refusal names.
fn holder(refused: &Result<Uuid, BrokerError>) -> Option<Uuid> {
    match refused {
        Err(BrokerError::Duplicate { existing, .. }) => *existing,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_racing_enqueues_of_one_key_on_two_connections_accept_one_and_name_it_to_the_rest() {
    let Some((one, two)) = two_backends("uniq-race").await else {
        return;
    };
    let name = unique("uniq-race");
    let key = unique("key");
    let (lock, _cleanup) = lock_of(JOB_TYPE, &key, TEN_MINUTES, &name);
    let queue = QueueConfig::new(&name);
    let racing = (0..20).map(|n| {
        let backend = if n % 2 == 0 { &one } else { &two };
        enqueue_unique(backend, &queue, &key, TEN_MINUTES)
    });
    let started = Instant::now();
    let answers = support::within(PATIENCE, "twenty enqueues", join_all(racing)).await;
    eprintln!("20 racing enqueues answered in {:?}", started.elapsed());
    let accepted: Vec<Uuid> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok().copied())
        .collect();
    assert_eq!(accepted.len(), 1, "exactly one is accepted: {answers:?}");
    let first = accepted[0];
    let refused: Vec<Option<Uuid>> = answers.iter().filter(|a| a.is_err()).map(holder).collect();
    assert_eq!(
        refused,
        vec![Some(first); 19],
        "the others name the one accepted"
    );
    let channel = raw_channel().await;
    assert_eq!(ready(&channel, &name).await, 1, "one job published");
    assert_eq!(ready(&channel, lock.name()).await, 1, "one lock message");

    one.release_unique(&lock, Uuid::new_v4())
        .await
        .expect("a release by another job is no error");
    let again = enqueue_unique(&two, &queue, &key, TEN_MINUTES).await;
    assert_eq!(
        holder(&again),
        Some(first),
        "another job's release leaves the lock"
    );
    two.release_unique(&lock, first).await.expect("released");
    assert_eq!(
        lock_messages(&lock).await,
        None,
        "a release deletes the empty lock queue"
    );
    let second = enqueue_unique(&one, &queue, &key, TEN_MINUTES)
        .await
        .expect("free once its holder let go");
    one.release_unique(&lock, second).await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_host_went_away_without_releasing_it_is_free_once_its_for_ends() {
    let Some((gone, other)) = two_backends("uniq-ttl").await else {
        return;
    };
    let name = unique("uniq-ttl");
    let key = unique("key");
    let for_ = Duration::from_secs(2);
    let (lock, _cleanup) = lock_of(JOB_TYPE, &key, for_, &name);
    let queue = QueueConfig::new(&name);
    let first = enqueue_unique(&gone, &queue, &key, for_)
        .await
        .expect("the first job takes the key");
    let taken = Instant::now();
    // Its host goes away holding the key: nothing will release it.
    gone.close().await;
    drop(gone);
    let refused = enqueue_unique(&other, &queue, &key, for_).await;
    assert_eq!(
        holder(&refused),
        Some(first),
        "still held by the job that is queued"
    );
    let second = support::within(PATIENCE, "the key to end with its `for`", async {
        loop {
            match enqueue_unique(&other, &queue, &key, for_).await {
                Ok(second) => return second,
                Err(BrokerError::Duplicate { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("{error}"),
            }
        }
    })
    .await;
    let freed_after = taken.elapsed();
    eprintln!("a lock of {for_:?} whose host went away was free after {freed_after:?}");
    assert!(
        freed_after >= for_ - Duration::from_millis(100),
        "not before `for`: {freed_after:?}"
    );
    other.release_unique(&lock, second).await.expect("released");
    assert_eq!(lock_messages(&lock).await, None, "released and deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_key_is_hashed_or_refused_and_a_strangers_message_beside_a_lock_is_dropped() {
    let Some(backend) = backend(&unique("uniq-hostile")).await else {
        return;
    };
    let name = unique("uniq-hostile");
    let hostile = format!("{}\0\n\u{202e}amq.gen\u{7f}", unique("key"));
    let (lock, _cleanup) = lock_of(JOB_TYPE, &hostile, TEN_MINUTES, &name);
    let holder_queue = format!("{}.holder", lock.name());
    let queue = QueueConfig::new(&name);
    let channel = raw_channel().await;

    let huge = "k".repeat(1 << 20);
    let refused = enqueue_unique(&backend, &queue, &huge, TEN_MINUTES).await;
    assert!(
        matches!(refused, Err(BrokerError::InvalidUnique { .. })),
        "a 1 MiB key is refused: {refused:?}"
    );

    let first = enqueue_unique(&backend, &queue, &hostile, TEN_MINUTES)
        .await
        .expect("control characters are just a key");
    assert_eq!(
        ready(&channel, &name).await,
        1,
        "only the first job was published"
    );
    // A stranger's message pushes the holder's id out of the holder queue.
    publish_plainly(&channel, &holder_queue, b"not a job id").await;
    for _ in 0..2 {
        let again = enqueue_unique(&backend, &queue, &hostile, TEN_MINUTES).await;
        assert_eq!(
            holder(&again),
            None,
            "still refused, the holder unknown: the stranger's message was dropped"
        );
    }
    assert_eq!(ready(&channel, &holder_queue).await, 0, "dropped");
    backend
        .release_unique(&lock, first)
        .await
        .expect("released");
    assert_eq!(lock_messages(&lock).await, None, "released and deleted");
    let second = enqueue_unique(&backend, &queue, &hostile, TEN_MINUTES)
        .await
        .expect("free once released");
    let again = enqueue_unique(&backend, &queue, &hostile, TEN_MINUTES).await;
    assert_eq!(
        holder(&again),
        Some(second),
        "and named again once recorded"
    );
    backend
        .release_unique(&lock, second)
        .await
        .expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_message_in_a_lock_queue_holds_the_key_only_until_its_for_ends() {
    let Some(backend) = backend(&unique("uniq-stranger")).await else {
        return;
    };
    let name = unique("uniq-stranger");
    let key = unique("key");
    let for_ = Duration::from_secs(2);
    let (lock, _cleanup) = lock_of(JOB_TYPE, &key, for_, &name);
    let queue = QueueConfig::new(&name);
    // Declared as a take declares them, then emptied, then filled by a stranger.
    let placeholder = Uuid::new_v4();
    let taken = backend
        .take_unique(&lock, placeholder)
        .await
        .expect("taken");
    assert_eq!(taken, Taken::Ours);
    let channel = raw_channel().await;
    let holder_queue = format!("{}.holder", lock.name());
    for queue in [lock.name(), holder_queue.as_str()] {
        channel
            .queue_purge(queue.into(), lapin::options::QueuePurgeOptions::default())
            .await
            .expect("purged");
    }
    publish_plainly(&channel, lock.name(), b"\0not a job id").await;
    let started = Instant::now();
    let refused = enqueue_unique(&backend, &queue, &key, for_).await;
    assert_eq!(holder(&refused), None, "held by no job the host can name");
    let first = support::within(PATIENCE, "the stranger's message to expire", async {
        loop {
            match enqueue_unique(&backend, &queue, &key, for_).await {
                Ok(first) => return first,
                Err(BrokerError::Duplicate { existing: None, .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("{error}"),
            }
        }
    })
    .await;
    eprintln!(
        "a stranger's message held a key of {for_:?} for {:?}",
        started.elapsed()
    );
    assert_eq!(
        ready(&channel, &name).await,
        1,
        "only the job after it was published"
    );
    backend
        .release_unique(&lock, first)
        .await
        .expect("released");
    assert_eq!(lock_messages(&lock).await, None, "released and deleted");
}

/// `jobhost enqueue noop.Noop {} --unique KEY --unique-for 10m` with `extra` arguments.
fn enqueue_args<'a>(key: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "enqueue",
        "noop.Noop",
        "{}",
        "--unique",
        key,
        "--unique-for",
        "10m",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn through_a_running_host_a_key_is_refused_while_its_job_waits_and_free_once_it_completed() {
    if skip_requested() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // The `noop` fixture's queue, which the worker tests of this binary use too.
    let _queues = runtime.block_on(fixture_queues(&["test.noop"]));
    let key = unique("key");
    let (lock, _cleanup) = lock_of("noop.Noop", &key, TEN_MINUTES, "test.noop");
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(jobhost_fixtures::wasm("noop"), dir.path().join("noop.wasm"))
        .expect("the fixture copies");
    let mut command = jobhost();
    command
        .args(["run", "--amqp", &amqp_url(), "--plugins"])
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    host.wait_for_line(STARTUP, |l| {
        l.contains("consuming") && l.contains("queue=test.noop ")
    });

    let held = host.cli(&enqueue_args(&key, &["--delay", "3s", "--json"]));
    assert!(
        held.status.success(),
        "{}",
        String::from_utf8_lossy(&held.stderr)
    );
    let first: serde_json::Value = serde_json::from_slice(&held.stdout).expect("json");
    let first = first["job_id"].as_str().expect("a job id").to_owned();

    let through_api = host.cli(&enqueue_args(&key, &[]));
    let said = String::from_utf8_lossy(&through_api.stderr);
    assert!(
        !through_api.status.success() && said.contains(&format!("job {first}")),
        "refused through the host, naming the job that waits: {said}"
    );
    let direct = jobhost()
        .args(enqueue_args(
            &key,
            &["--amqp", &amqp_url(), "--queue", "test.noop"],
        ))
        .output()
        .expect("jobhost runs");
    let said = String::from_utf8_lossy(&direct.stderr);
    assert!(
        !direct.status.success() && said.contains(&format!("job {first}")),
        "refused straight on the broker too: {said}"
    );
    let metrics = http_get(&host.admin, "/metrics", &[]);
    assert!(
        metrics.contains(r#"jobhost_enqueue_duplicates_total{job_type="noop.Noop"} 1"#),
        "the host counts the refusal it answered:\n{metrics}"
    );

    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&first)) && l.contains("job completed")
    });
    let after = host.cli(&enqueue_args(&key, &["--json"]));
    assert!(
        after.status.success(),
        "free once the job completed: {}",
        String::from_utf8_lossy(&after.stderr)
    );
    let second: serde_json::Value = serde_json::from_slice(&after.stdout).expect("json");
    let second = second["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&second)) && l.contains("job completed")
    });
    let left = runtime.block_on(lock_messages(&lock));
    assert_eq!(
        left, None,
        "the second job let go of the key, and its queue is gone"
    );
}

/// `jobhost enqueue probe.Fetch` of a call to `url`, unique by `key` for ten minutes,
/// through `host`.
fn enqueue_fetch(host: &Host, url: &str, key: &str) -> std::process::Output {
    let payload = serde_json::json!({ "url": url, "customer": key }).to_string();
    tokio::task::block_in_place(|| {
        host.cli(&[
            "enqueue",
            FETCH,
            &payload,
            "--unique",
            key,
            "--unique-for",
            "10m",
            "--json",
        ])
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_job_whose_host_is_killed_mid_run_holds_its_key_until_it_completes_elsewhere() {
    if backend(&unique("uniq-killed")).await.is_none() {
        return;
    }
    // The fixture's queues, the job's hold queue and its lock, deleted after.
    let vhost = Vhost::new("uniq-killed");
    let (ledger, origin) = probe::Ledger::start().await;
    let grants = format!("[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\n");
    let key = "order-1";
    let patience = Duration::from_secs(60);

    // Host A runs the job, which waits in a call to the ledger until it lets go.
    let mut a = probe::start_host(&vhost.url, &grants, "1s");
    let first = json_of(&enqueue_fetch(
        &a,
        &format!("{origin}/hold?key={key}&i=0"),
        key,
    ));
    let first = first["job_id"].as_str().expect("a job id").to_owned();
    until(patience, "host A to run the job", || {
        ledger.count("/hold", false) == 1
    })
    .await;
    let b = probe::start_host(&vhost.url, &grants, "1s");
    a.signal("KILL", PATIENCE);
    until(patience, "host B to run the job again", || {
        ledger.count("/hold", false) == 2
    })
    .await;
    let work = format!("{origin}/work?key={key}&i=1");
    let refused = enqueue_fetch(&b, &work, key);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains(&format!("job {first}")),
        "the key is held by the job that runs again: {said}"
    );

    let released = Instant::now();
    ledger.release();
    tokio::task::block_in_place(|| {
        b.wait_for_line(PROCESSING, |l| {
            l.contains(logged_id(&first)) && l.contains("job completed")
        })
    });
    let second = support::within(patience, "the key to be free", async {
        loop {
            let again = enqueue_fetch(&b, &work, key);
            if again.status.success() {
                return json_of(&again);
            }
            let said = String::from_utf8_lossy(&again.stderr);
            assert!(said.contains(&format!("job {first}")), "{said}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let freed = released.elapsed();
    eprintln!(
        "a unique job whose host was SIGKILLed mid-run kept its key until it completed on the \
         other host; the key was free {freed:?} after that run was let go (its `for`: 10 min)"
    );
    assert_ne!(second["job_id"].as_str(), Some(first.as_str()));
    until(patience, "the second job of the key to run", || {
        ledger.count("/work", true) == 1
    })
    .await;
}

/// How many messages `lock`'s queue holds; `None` when it does not exist (a release
/// deletes it).
async fn lock_messages(lock: &UniqueLock) -> Option<u32> {
    let channel = raw_channel().await;
    let passive = lapin::options::QueueDeclareOptions {
        passive: true,
        ..lapin::options::QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(
            lock.name().into(),
            passive,
            lapin::types::FieldTable::default(),
        )
        .await;
    declared.ok().map(|queue| queue.message_count())
}
