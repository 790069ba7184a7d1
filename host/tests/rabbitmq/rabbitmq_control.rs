//! Pause, resume and cancel across a fleet of two `jobhost run` processes on the test
//! broker, driven through the real binary's `jobhost queue` and `jobhost job` commands:
//! a pause survives a SIGKILL and restart of every host (counted in the `ledger` fixture's
//! ledger, kept apart from the hosts), a queue paused in both hosts' grants file stays
//! unconsumed through a pause and resume order and runs once the file lets it go, a held
//! job cancelled never runs, a cancel reaches a
//! job spinning on the other host in under a second (measured and printed), and garbage on
//! the control stream is skipped. Below the binary, a follower whose connection the broker
//! closes joins again and reads the orders from the oldest kept, the missed one included.
//!
//! Needs the RabbitMQ broker at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! without one it fails, unless `JOBHOST_SKIP_BROKER_TESTS=1` asks to skip it. Each fleet
//! runs in a virtual host of its own (the ledger's, or a `Vhost`), deleted after with the
//! fixture queues, the hold queue, the pause mark and the fleet's control stream, so no
//! other host on the broker sees its orders or its garbage. The follower below the binary
//! reads the broker's shared `jobhost.control`, where what it leaves is harmless: cancels
//! of its own job ids.
//!
//! ```text
//! cargo test -p jobhost --test rabbitmq rabbitmq_control:: -- --nocapture
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobhost::broker::{CONTROL_STREAM, Command, Control, Followed, Follower, Order};
use jobhost::job::Operator;
use uuid::Uuid;

use crate::support;
use crate::support::cli::{
    Host, PROCESSING, STARTUP, json_of, logged_id, logs, stdout_of, write_grants,
};
use crate::support::faults::ledger::{Ledger, LedgerQueues, fresh_ids, publish_all};
use crate::support::{
    PATIENCE, Vhost, backend, close_connections_named, publish_plainly, raw_channel_at, ready,
    unique, within,
};

/// Two hosts of `fixture` on the broker at `url`, once each consumes `queue`.
fn fleet(fixture: &str, url: &str, queue: &str) -> [Host; 2] {
    let hosts = [
        Host::on_broker(fixture, url, None),
        Host::on_broker(fixture, url, None),
    ];
    for host in &hosts {
        consuming(host, queue, 0);
    }
    hosts
}

/// Wait for `host` to say, after its first `skip` lines, that it consumes `queue`.
fn consuming(host: &Host, queue: &str, skip: usize) {
    let field = format!("queue={queue} ");
    tokio::task::block_in_place(|| {
        host.wait_for_line_after(skip, STARTUP, |l| {
            l.contains("consuming") && !l.contains("stopped") && l.contains(&field)
        })
    });
}

/// Run `jobhost ARGS` against `host`'s admin API, expecting success; its stdout.
fn cli(host: &Host, args: &[&str]) -> String {
    stdout_of(&tokio::task::block_in_place(|| host.cli(args)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_survives_a_restart_of_every_host_and_a_held_job_cancelled_never_runs() {
    if backend(&unique("control-probe")).await.is_none() {
        return;
    }
    // The fixture's queues, the hold queue of the held job and the pause mark are in the
    // ledger's virtual host, deleted with them after the hosts are gone.
    let queues = LedgerQueues::classic();
    let (work_queue, done_queue) = (queues.work, queues.done);
    let publisher = Arc::new(queues.backend(&unique("control-publisher")).await);
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let hosts = fleet("ledger", &queues.url, work_queue);

    let said = cli(
        &hosts[0],
        &["queue", "pause", work_queue, "--by", "alice@ops"],
    );
    assert!(
        said.starts_with(&format!("paused {work_queue} for the fleet (by alice@ops")),
        "{said}"
    );
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &["stopped consuming the paused queue", work_queue],
        );
    }
    let ids = fresh_ids(20);
    publish_all(
        &publisher,
        ids.iter().map(|&id| queues.work(id, 0)).collect(),
    )
    .await;

    // Every host killed and started again: the pause is in the broker, not in a host.
    drop(hosts);
    let hosts = [
        Host::on_broker("ledger", &queues.url, None),
        Host::on_broker("ledger", &queues.url, None),
    ];
    for host in &hosts {
        logs(host, STARTUP, &["queue paused by an operator", work_queue]);
        consuming(host, done_queue, 0);
    }
    // A few seconds in which two hosts idle next to 20 ready jobs.
    let paused = "the queue is paused";
    ledger
        .none_complete(&ids, Duration::from_secs(3), paused)
        .await;
    let channel = queues.raw_channel().await;
    assert_eq!(
        ready(&channel, work_queue).await,
        20,
        "the jobs keep their place"
    );

    let resumed = Instant::now();
    cli(
        &hosts[1],
        &["queue", "resume", work_queue, "--by", "alice@ops"],
    );
    ledger
        .wait_for_all(&ids, Duration::from_secs(60), "after the resume")
        .await;
    println!(
        "paused through a restart of both hosts: 0 of 20 jobs ran in 3 s; all 20 done {:?} after the resume",
        resumed.elapsed()
    );

    // A job held for 3 s, cancelled through the other host while it waits.
    let id = fresh_ids(1)[0];
    let enqueued = json_of(&tokio::task::block_in_place(|| {
        hosts[0].cli(&[
            "enqueue",
            "ledger.Work",
            &format!(r#"{{"id": {id}}}"#),
            "--delay",
            "3s",
            "--json",
        ])
    }));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    let said = cli(&hosts[1], &["job", "cancel", &job_id, "--by", "bob@ops"]);
    assert!(
        said.starts_with(&format!("cancelled job {job_id} (by bob@ops")),
        "{said}"
    );
    let dead = ledger.wait_for_dead(1, Duration::from_secs(30)).await;
    assert!(
        dead[0].reason.starts_with("cancelled by bob@ops at "),
        "the dead letter says who and when: {}",
        dead[0].reason
    );
    ledger.drain().await;
    assert_eq!(ledger.completed(&[id]), 0, "the cancelled job never ran");
    // The host logs the settlement after its ack, so the line may follow the dead letter.
    let logged = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let found = hosts
            .iter()
            .flat_map(Host::log_lines)
            .find(|l| l.contains("job cancelled") && l.contains(logged_id(&job_id)));
        if let Some(line) = found {
            break line;
        }
        assert!(Instant::now() < logged, "a host logs the cancellation");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(line.contains("attempt=1"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_paused_in_the_grants_file_is_consumed_by_no_host_until_the_file_lets_it_go() {
    if backend(&unique("control-probe")).await.is_none() {
        return;
    }
    let queues = LedgerQueues::classic();
    let (work_queue, done_queue) = (queues.work, queues.done);
    let publisher = Arc::new(queues.backend(&unique("file-pause-publisher")).await);
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let config = tempfile::tempdir().expect("a directory for the grants file");
    let grants_file = config.path().join("jobhost.toml");
    write_grants(
        &grants_file,
        &format!("[queues.\"{work_queue}\"]\npaused = true\n"),
    );
    let hosts = [
        Host::on_broker("ledger", &queues.url, Some(&grants_file)),
        Host::on_broker("ledger", &queues.url, Some(&grants_file)),
    ];
    for host in &hosts {
        logs(
            host,
            STARTUP,
            &["queue paused by the grants file", work_queue],
        );
        consuming(host, done_queue, 0);
    }
    let ids = fresh_ids(10);
    publish_all(
        &publisher,
        ids.iter().map(|&id| queues.work(id, 0)).collect(),
    )
    .await;
    // An operator's pause and resume do not undo the file: each host says so after the
    // resume and goes on not consuming.
    cli(
        &hosts[0],
        &["queue", "pause", work_queue, "--by", "alice@ops"],
    );
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &["queue paused by an operator", work_queue],
        );
    }
    cli(
        &hosts[0],
        &["queue", "resume", work_queue, "--by", "alice@ops"],
    );
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &[
                "resumed by an operator, but the grants file pauses it",
                work_queue,
            ],
        );
    }
    let paused = "the file pauses the queue";
    ledger
        .none_complete(&ids, Duration::from_secs(2), paused)
        .await;
    let channel = queues.raw_channel().await;
    assert_eq!(
        ready(&channel, work_queue).await,
        10,
        "the jobs keep their place"
    );
    // The operator lets go in the file; each host reloads it and consumes again.
    write_grants(
        &grants_file,
        &format!("[queues.\"{work_queue}\"]\npaused = false\n"),
    );
    ledger
        .wait_for_all(&ids, Duration::from_secs(60), "after the file lets go")
        .await;
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &["queue no longer paused by the grants file", work_queue],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_job_spinning_on_the_other_host_in_under_a_second() {
    const SPIN: &str = "test.spin";
    if backend(&unique("control-check")).await.is_none() {
        return;
    }
    // The fixture's queues and the fleet's control stream, deleted after.
    let vhost = Vhost::new("control");
    let hosts = fleet("spin", &vhost.url, SPIN);
    for host in &hosts {
        logs(host, PROCESSING, &["following the operators' orders"]);
    }

    // Garbage on the control stream, as any AMQP client may publish it: skipped, and the
    // hosts follow on (the cancel below reaches them after it).
    let channel = raw_channel_at(&vhost.url).await;
    let too_long = format!(r#"{{"op":"pause","queue":"{}"}}"#, "q".repeat(5000));
    for body in [
        &b"\xff\xfe not JSON"[..],
        br#"{"op":"explode","by":"eve","at_ms":1}"#,
        br#"{"op":"pause","queue":"amq.evil","by":"eve","at_ms":1}"#,
        too_long.as_bytes(),
    ] {
        publish_plainly(&channel, CONTROL_STREAM, body).await;
    }
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &["skipping a message that is not an order"],
        );
    }

    let enqueued = json_of(&tokio::task::block_in_place(|| {
        hosts[0].cli(&["enqueue", "spin.Spin", "{}", "--json"])
    }));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    let started = Instant::now();
    let runner = loop {
        if let Some(runner) = hosts
            .iter()
            .position(|h| h.log_lines().iter().any(|l| l.contains("spinning forever")))
        {
            break runner;
        }
        assert!(
            started.elapsed() < PROCESSING,
            "a host runs the spinning job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (running, other) = (&hosts[runner], &hosts[1 - runner]);

    let asked = Instant::now();
    cli(other, &["job", "cancel", &job_id, "--by", "bob@ops"]);
    logs(running, PROCESSING, &["job cancelled", logged_id(&job_id)]);
    let reached = asked.elapsed();
    println!(
        "a cancel given through host {} reached job {} spinning on host {} in {reached:?} \
         (the `jobhost job cancel` process included)",
        1 - runner,
        logged_id(&job_id),
        runner
    );
    assert!(reached < Duration::from_secs(1), "took {reached:?}");
    let reasons = support::take_death_reasons(&channel, SPIN).await;
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("cancelled by bob@ops at "),
        "{reasons:?}"
    );
}

/// A cancel of a fresh job id, which no other test or host gives.
fn fresh_cancel() -> (Uuid, Order) {
    let job_id = Uuid::new_v4();
    let by = Operator::new("carol@ops").expect("an operator");
    (job_id, Order::now(Command::Cancel { job_id }, by))
}

/// Read `follower` until it hands on the cancel of `job_id`; whether it joined again
/// before that.
async fn read_until_cancel_of(follower: &mut impl Follower, job_id: Uuid) -> bool {
    let mut joined = false;
    within(PATIENCE, "the order to be followed", async {
        loop {
            match follower.next().await.expect("the backend is open") {
                Followed::Joined => joined = true,
                Followed::Order(order) if order.command == (Command::Cancel { job_id }) => {
                    return;
                }
                Followed::Order(_) => {}
            }
        }
    })
    .await;
    joined
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_connection_drops_joins_again_and_reads_the_order_it_missed() {
    let name = unique("control-follower");
    let Some(backend) = backend(&name).await else {
        return;
    };
    let mut follower = backend.follow().await.expect("a follower");
    let (before, order) = fresh_cancel();
    backend
        .order(&order)
        .await
        .expect("the broker takes the order");
    assert!(
        read_until_cancel_of(&mut follower, before).await,
        "the first read is a join"
    );

    let closed = name.clone();
    tokio::task::spawn_blocking(move || close_connections_named(&closed))
        .await
        .expect("rabbitmqctl runs");
    // Given while the connection is down or being replaced: the publish waits for the new one.
    let (missed, order) = fresh_cancel();
    backend
        .order(&order)
        .await
        .expect("the broker takes the order after the reconnect");
    assert!(
        read_until_cancel_of(&mut follower, missed).await,
        "the follower announced that it joined again"
    );
    let (after, order) = fresh_cancel();
    backend
        .order(&order)
        .await
        .expect("the broker takes the order");
    assert!(
        !read_until_cancel_of(&mut follower, after).await,
        "and follows on without joining again"
    );
}
