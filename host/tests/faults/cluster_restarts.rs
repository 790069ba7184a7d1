//! What flow control keeps across a broker restart and a lost node, on the three-node
//! cluster of `.ci/cluster-broker.sh`, with `jobhost run` hosts that stay up and reconnect
//! by themselves (issue 36: "pause survives a restart of every host", and the broker's
//! edges of docs/flow-control.md, "The guarantee, exactly", and docs/reliability.md,
//! "Unique jobs"). A broker restart is every node's `rabbitmqctl stop_app`, then
//! `start_app`: every connection closes, and the broker keeps only what is durable.
//!
//! - A queue paused with `jobhost queue pause` stays paused while the node the hosts use
//!   is stopped, and through a restart; a unique key taken before both is refused after
//!   them, an enqueue of it fails while its lock's node is down, and it is free again once
//!   its job completes. The resume runs every job once, counted in the `ledger-quorum`
//!   fixture's ledger, kept apart from the hosts.
//! - A key's cap of 2: while the node of its permit queue is stopped no job of the key
//!   runs; the permits two stalled jobs hold come back with the restart, and after it the
//!   key runs two jobs at once and never more (the stalled jobs still running on their
//!   hosts are the documented exception); counted by an HTTP server the jobs call.
//! - A key's rate limit: while the node of its token queue is stopped no job of the key
//!   starts; the tokens saved up before the restart are gone after it (read on the token
//!   queue's node while the hosts' nodes are still down), and once the hosts reconnect the
//!   jobs start within the limit, from the same server's record.
//!
//! Each test runs in a virtual host of its own on the cluster, which goes with the
//! cluster; they run one at a time ([`Cluster::from_env`]), each leaving every node
//! running. Without the cluster each says so and passes; `JOBHOST_REQUIRE_CLUSTER=1` (set
//! by `.ci/test`) makes that a failure. About 80 s for the three:
//!
//! ```text
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_restarts:: -- --nocapture
//! ```

use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobhost::broker::{Backend, Permits, RabbitMqBackend, RabbitMqOptions, Tokens};

use crate::support::cli::{
    Host, PROCESSING, STARTUP, jobhost, json_of, logs, logs_after, stdout_of,
};
use crate::support::faults::cluster::Cluster;
use crate::support::faults::ledger::{Ledger, LedgerQueues, fresh_ids, publish_all, work_on};
use crate::support::probe::{self, FETCH, fetch, rate_of};
use crate::support::{raw_channel_at, ready, within};

/// How long hosts may take to come back after a restart, and a fleet to run a few jobs.
const PATIENCE: Duration = Duration::from_secs(60);

/// Connect a backend to `url`, named `name` on the broker.
async fn connect(url: &str, name: &str) -> RabbitMqBackend {
    RabbitMqBackend::connect(url, RabbitMqOptions::default().connection_name(name))
        .await
        .expect("a connection to the cluster")
}

/// `jobhost run --amqp NODES --plugins DIR`, DIR holding the `ledger-quorum` fixture, once
/// it consumes the fixture's two queues.
fn ledger_host(amqp: &str, queues: &LedgerQueues) -> Host {
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("ledger-quorum"),
        dir.path().join("ledger.wasm"),
    )
    .expect("the fixture copies into the plugin directory");
    let mut command = jobhost();
    command
        .args(["run", "--amqp", amqp, "--plugins"])
        .arg(dir.path());
    let host = tokio::task::block_in_place(|| Host::spawn(command, dir, STARTUP));
    for queue in [queues.work, queues.done] {
        logs(&host, STARTUP, &["consuming", &format!("queue={queue} ")]);
    }
    host
}

/// Wait until every one of `hosts`, after the lines it had logged at `marks`, follows the
/// operators' orders again: it reconnected and looked at the pause marks.
fn following_again(hosts: &[Host], marks: &[usize]) {
    for (host, &skip) in hosts.iter().zip(marks) {
        logs_after(host, skip, PATIENCE, &["following the operators' orders"]);
    }
}

/// How many lines each of `hosts` logged so far.
fn marks(hosts: &[Host]) -> Vec<usize> {
    hosts.iter().map(Host::line_count).collect()
}

/// Run `jobhost ARGS --admin <host>` to completion, bounded (an enqueue the broker cannot
/// take must answer, not hang): [`Host::cli`] as a child process of the runtime, killed if
/// it does not end in time.
async fn cli(host: &Host, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::from(jobhost());
    command
        .args(args)
        .args(["--admin", &host.admin])
        .kill_on_drop(true);
    within(PATIENCE, "the jobhost client to answer", command.output())
        .await
        .expect("the jobhost client runs")
}

/// `jobhost enqueue ledger.Work {"id": ID} --unique KEY --unique-for 10m --json` through
/// `host`.
async fn enqueue_unique(host: &Host, id: u64, key: &str) -> Output {
    let payload = format!(r#"{{"id": {id}}}"#);
    cli(
        host,
        &[
            "enqueue",
            "ledger.Work",
            &payload,
            "--unique",
            key,
            "--unique-for",
            "10m",
            "--json",
        ],
    )
    .await
}

/// The `host:port` of a node's URL, as the hosts' log names it.
fn address(url: &str) -> &str {
    let after_user = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    after_user.split('/').next().unwrap_or(after_user)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_and_a_held_unique_key_outlast_a_lost_node_and_a_broker_restart() {
    let Some(cluster) = Cluster::from_env().await else {
        return;
    };
    let urls = cluster.vhost("pause-unique");
    // The ledger and the publisher use node 3, which is only ever restarted; the hosts try
    // the nodes in order, so they use node 1 until it is lost.
    let queues = LedgerQueues::quorum(urls[2].clone());
    let work = queues.work;
    let amqp = urls.join(",");
    let hosts = [ledger_host(&amqp, &queues), ledger_host(&amqp, &queues)];
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let publisher = Arc::new(connect(&urls[2], "restart-publisher").await);

    let said = stdout_of(&cli(&hosts[0], &["queue", "pause", work, "--by", "ops@restart"]).await);
    assert!(
        said.starts_with(&format!("paused {work} for the fleet")),
        "{said}"
    );
    for host in &hosts {
        logs(
            host,
            PROCESSING,
            &["stopped consuming the paused queue", work],
        );
    }
    let ids = fresh_ids(21);
    let (queued, unique_id) = (&ids[..20], ids[20]);
    publish_all(
        &publisher,
        queued.iter().map(|&id| work_on(work, id, 0, 0)).collect(),
    )
    .await;
    // The key's lock is a classic queue on the node the host uses: node 1.
    let key = "order-36";
    let held = json_of(&enqueue_unique(&hosts[0], unique_id, key).await);
    let holder = held["job_id"].as_str().expect("a job id").to_owned();

    // Node 1 lost: the hosts move on to node 2, follow the orders again and stay paused.
    let before = marks(&hosts);
    cluster.ctl(0, &["stop_app"]);
    let node_2 = address(&urls[1]);
    for (host, &skip) in hosts.iter().zip(&before) {
        logs_after(host, skip, PATIENCE, &["reconnected to the broker", node_2]);
    }
    following_again(&hosts, &before);
    let second = fresh_ids(1)[0];
    let refused = enqueue_unique(&hosts[1], second, key).await;
    let said = String::from_utf8_lossy(&refused.stderr);
    println!("an enqueue of the key while its lock's node is down: {said}");
    assert!(
        !refused.status.success(),
        "refused while the lock's node is down, not taken a second time: {said}"
    );
    ledger
        .none_complete(&ids, Duration::from_secs(3), "node 1 is down")
        .await;
    cluster.start(&[0]).await;
    cluster
        .await_not_quorum_critical(0, Duration::from_secs(120))
        .await;

    // The broker restarts under the hosts.
    let before = marks(&hosts);
    let stopping = Instant::now();
    cluster.stop_all();
    let starting = Instant::now();
    cluster.start(&[0, 1, 2]).await;
    let started = starting.elapsed();
    following_again(&hosts, &before);
    let back = starting.elapsed();
    ledger.reconnect().await;
    ledger
        .none_complete(&ids, Duration::from_secs(3), "paused after the restart")
        .await;
    let channel = raw_channel_at(&urls[2]).await;
    assert_eq!(ready(&channel, work).await, 21, "the jobs keep their place");
    let refused = enqueue_unique(&hosts[1], second, key).await;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains(&format!("job {holder}")),
        "the key is still held by the job that waits: {said}"
    );

    let resumed = Instant::now();
    cli(&hosts[1], &["queue", "resume", work, "--by", "ops@restart"]).await;
    ledger
        .wait_for_all(&ids, PATIENCE, "after the resume")
        .await;
    let ran = resumed.elapsed();
    let row = ledger.row("", &ids, &[]);
    assert_eq!(row.duplicated, 0, "each job ran once");
    // Free once its job completed: the host releases the lock after its ack.
    let freed = within(PATIENCE, "the key to be free", async {
        loop {
            let again = enqueue_unique(&hosts[0], second, key).await;
            if again.status.success() {
                return json_of(&again);
            }
            let said = String::from_utf8_lossy(&again.stderr);
            assert!(said.contains(&format!("job {holder}")), "{said}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_ne!(freed["job_id"], held["job_id"]);
    ledger
        .wait_for_all(&[second], PATIENCE, "the second job of the key")
        .await;
    println!(
        "paused through node 1's loss and a broker restart (stop_app of every node took \
         {:?}, start_app {started:?}): the hosts were following the orders again {back:?} \
         after start_app was given, ran none of 21 jobs in 3 s, and the key stayed held; after the \
         resume all 21 ran once in {ran:?}, and the key was free again",
        starting - stopping
    );
}

/// The grants file of the `http-probe` hosts: calls to the ledger at `origin` allowed, and
/// `limit` on `probe.Fetch` (`concurrency = ...` or `rate = ...`).
fn probe_grants(origin: &str, limit: &str) -> String {
    format!(
        "[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\n\
         [jobs.\"{FETCH}\"]\n{limit}\n"
    )
}

/// Wait at most [`PATIENCE`] until `condition` holds, polling the ledger of `probe`'s
/// calls; fail naming `what`, with the calls and the hosts' warnings and errors, which tell
/// a job that waits for its limit from a host that lost its way back to the broker.
async fn until_seen(
    hosts: &[Host],
    ledger: &probe::Ledger,
    what: &str,
    condition: impl Fn() -> bool,
) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        if Instant::now() >= deadline {
            let calls: Vec<String> = ledger
                .calls()
                .iter()
                .map(|c| format!("{} {} ended: {}", c.path, c.key, c.ended.is_some()))
                .collect();
            let warnings: Vec<String> = hosts
                .iter()
                .flat_map(Host::log_lines)
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .collect();
            let warnings = &warnings[warnings.len().saturating_sub(30)..];
            panic!(
                "timed out after {PATIENCE:?} waiting for {what}; the calls: {calls:?}; the \
                 hosts' last warnings and errors:\n{}",
                warnings.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A failover that leaves a limit's queue behind: node 3, which holds the permit or token
/// queue of key `key` while the hosts and the work queue use the other nodes, is stopped.
/// `count` jobs of the key published then wait, the hosts warning that they `cannot take`
/// one; none runs for 3 s. Node 3 starts again and they run: returns once all have ended,
/// with how long after the start was given the first began.
async fn none_runs_while_its_limits_node_is_down(
    cluster: &Cluster,
    hosts: &[Host],
    (ledger, origin): (&probe::Ledger, &str),
    producer: &RabbitMqBackend,
    key: &str,
    count: usize,
) -> Duration {
    let before = marks(hosts);
    let stopped = Instant::now();
    cluster.ctl(2, &["stop_app"]);
    let ours = |c: &probe::Call| c.key == key && c.started > stopped;
    for i in 0..count {
        fetch(producer, origin, "/work", key, 1000 + i).await;
    }
    until_seen(
        hosts,
        ledger,
        "a host to warn that it cannot take from the limit's queue",
        || {
            hosts.iter().zip(&before).any(|(host, &skip)| {
                host.log_lines()
                    .iter()
                    .skip(skip)
                    .any(|l| l.contains("cannot take a") && l.contains("waits as if throttled"))
            })
        },
    )
    .await;
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        let started = ledger.calls().iter().filter(|c| ours(c)).count();
        assert_eq!(
            started, 0,
            "no job of the key runs while its limit's node is down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let starting = Instant::now();
    cluster.start(&[2]).await;
    until_seen(
        hosts,
        ledger,
        "the key's jobs to run once the node is back",
        || {
            ledger
                .calls()
                .iter()
                .filter(|c| ours(c) && c.ended.is_some())
                .count()
                == count
        },
    )
    .await;
    ledger
        .calls()
        .iter()
        .filter(|c| ours(c))
        .map(|c| c.started - starting)
        .min()
        .expect("the key's calls")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permits_of_a_cap_come_back_after_a_broker_restart_and_the_cap_holds_after_it() {
    let Some(cluster) = Cluster::from_env().await else {
        return;
    };
    let urls = cluster.vhost("caps");
    let (ledger, origin) = probe::Ledger::start().await;
    let grants = probe_grants(&origin, r#"concurrency = { key = "customer", limit = 2 }"#);
    // The key's permit queue lives on node 3, made there by a first take; the hosts use
    // node 1 (the first they try), where they declare the work queue.
    let permits = Permits::for_key(FETCH, Some("c1"), 2, Duration::from_secs(60));
    let maker = connect(&urls[2], "caps-restart-maker").await;
    drop(maker.take_permit(&permits).await.expect("a take"));
    maker.close().await;
    drop(maker);
    let amqp = urls.join(",");
    let hosts = [
        probe::start_host(&amqp, &grants, "100ms"),
        probe::start_host(&amqp, &grants, "100ms"),
    ];
    let producer = connect(&urls[1], "caps-restart-producer").await;

    let failover = none_runs_while_its_limits_node_is_down(
        &cluster,
        &hosts,
        (&ledger, &origin),
        &producer,
        "c1",
        3,
    )
    .await;
    let failover_most = ledger.most_at_once(Some("c1"), |_| true);
    assert!(
        failover_most <= 2,
        "the cap holds once the node is back: {failover_most}"
    );
    let channel = raw_channel_at(&urls[2]).await;

    // Two jobs of key c1 stall in both permits; four more wait for one.
    ledger.stall(true);
    for i in 0..2 {
        fetch(&producer, &origin, "/stall", "c1", i).await;
    }
    until_seen(&hosts, &ledger, "two jobs to stall in both permits", || {
        ledger.count("/stall", false) == 2
    })
    .await;
    for i in 0..4 {
        fetch(&producer, &origin, "/work", "c1", i).await;
    }
    until_seen(
        &hosts,
        &ledger,
        "a host to throttle a job of the key",
        || {
            hosts
                .iter()
                .any(|host| host.log_lines().iter().any(|l| l.contains("job throttled")))
        },
    )
    .await;
    assert_eq!(ready(&channel, &permits.name).await, 0, "both permits held");

    // The broker restarts while the two stalled jobs still run on their hosts.
    ledger.stall(false);
    let restart = Instant::now();
    cluster.stop_all();
    let starting = Instant::now();
    cluster.start(&[0, 1, 2]).await;
    let started = starting.elapsed();
    // While the nodes stop one by one, hosts that lost their connection reconnect to one
    // still up, their permits back while their jobs run on: the documented window of a
    // host that lost its connection. After the restart is what starts once every node
    // was down.
    let after = |call: &probe::Call| call.started > starting;
    let in_window = ledger
        .calls()
        .iter()
        .filter(|c| c.started > restart && !after(c))
        .count();
    let ended_after = |path: &str| {
        ledger
            .calls()
            .iter()
            .filter(|c| after(c) && c.path == path && c.ended.is_some())
            .count()
    };
    // The stalled jobs' deliveries were unacked: the broker hands them out again, and so
    // any job the window ran (at least once: its ack went with its connection).
    until_seen(
        &hosts,
        &ledger,
        "the four waiting jobs and the two redelivered ones to run after the restart",
        || ended_after("/work") >= 4 && ended_after("/stall") >= 2,
    )
    .await;
    let first = ledger
        .calls()
        .iter()
        .filter(|c| after(c))
        .map(|c| c.started)
        .min()
        .expect("calls after the restart");
    let (since_restart, everything) = (
        ledger.most_at_once(Some("c1"), after),
        ledger.most_at_once(Some("c1"), |_| true),
    );
    let still_stalled = ledger
        .calls()
        .iter()
        .filter(|c| c.path == "/stall" && !after(c) && c.ended.is_none())
        .count();
    println!(
        "a cap of 2 while the permit queue's node was down: no job of the key ran for 3 s, \
         the first began {failover:?} after that node's start_app was given, at most \
         {failover_most} at once; across a broker restart (start_app took {started:?}): \
         {in_window} jobs of the key ran while the nodes stopped, the first after it started \
         {:?} after start_app was given; after the restart at most {since_restart} ran at \
         once, with the {still_stalled} jobs that held the permits before it still running \
         ({everything} at once in all)",
        first - starting
    );
    assert_eq!(
        since_restart, 2,
        "the permits came back with the restart, and the cap holds after it"
    );
    assert_eq!(
        still_stalled, 2,
        "the jobs of before the restart ran past it"
    );
    assert!(
        everything <= 4,
        "at most the cap more while they run: {everything}"
    );
    // A channel of before the restart went with it.
    let channel = raw_channel_at(&urls[2]).await;
    within(PATIENCE, "both permits back in their queue", async {
        while ready(&channel, &permits.name).await != 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_of_a_rate_limit_are_gone_after_a_broker_restart_and_the_limit_holds_after_it() {
    let Some(cluster) = Cluster::from_env().await else {
        return;
    };
    let urls = cluster.vhost("rates");
    let (ledger, origin) = probe::Ledger::start().await;
    let grants = probe_grants(&origin, r#"rate = { key = "customer", limit = "10/s" }"#);
    // The token queue lives on node 3, declared there first by a take that finds it new;
    // the hosts use nodes 1 and 2 only, so it can be read after the restart before any
    // host is back to refill it.
    let tokens = Tokens::for_key(FETCH, Some("r1"), Duration::from_millis(100), 10);
    let maker = connect(&urls[2], "rates-restart-maker").await;
    assert!(
        !maker.take_token(&tokens).await.expect("a take"),
        "a new bucket is empty"
    );
    maker.close().await;
    drop(maker);
    let amqp = format!("{},{}", urls[0], urls[1]);
    let hosts = [
        probe::start_host(&amqp, &grants, "1s"),
        probe::start_host(&amqp, &grants, "1s"),
    ];
    let producer = connect(&urls[1], "rates-restart-producer").await;
    for i in 0..3 {
        fetch(&producer, &origin, "/work", "r1", i).await;
    }
    until_seen(&hosts, &ledger, "the hosts to run 3 jobs", || {
        ledger.count("/work", true) == 3
    })
    .await;
    let failover = none_runs_while_its_limits_node_is_down(
        &cluster,
        &hosts,
        (&ledger, &origin),
        &producer,
        "r1",
        5,
    )
    .await;
    let channel = raw_channel_at(&urls[2]).await;
    within(PATIENCE, "the bucket to fill up to its burst", async {
        while ready(&channel, &tokens.name).await != 10 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Node 3 stops last and starts first, alone: the hosts cannot reach a node yet.
    cluster.stop_all();
    cluster.start(&[2]).await;
    let channel = raw_channel_at(&urls[2]).await;
    let left = ready(&channel, &tokens.name).await;
    assert_eq!(
        left, 0,
        "the 10 tokens saved up did not survive the restart"
    );
    let starting = Instant::now();
    cluster.start(&[0, 1]).await;
    // The same key's bucket: the one the restart emptied.
    let after = |c: &probe::Call| c.key == "r1" && c.started > starting;
    for i in 0..30 {
        fetch(&producer, &origin, "/work", "r1", 3 + i).await;
    }
    until_seen(
        &hosts,
        &ledger,
        "the hosts to run 30 jobs after the restart",
        || {
            ledger
                .calls()
                .iter()
                .filter(|c| after(c) && c.ended.is_some())
                .count()
                == 30
        },
    )
    .await;
    let mut starts: Vec<Instant> = ledger
        .calls()
        .iter()
        .filter(|c| after(c))
        .map(|c| c.started)
        .collect();
    starts.sort();
    let (most, rate, ahead) = rate_of(&starts, 10, 10.0);
    let mut per_second = vec![0; 1 + (starts[29] - starts[0]).as_secs() as usize];
    for at in &starts {
        per_second[(*at - starts[0]).as_secs() as usize] += 1;
    }
    println!(
        "a rate of 10/s, burst 10, while the token queue's node was down: no job of the key \
         started for 3 s, the first began {failover:?} after that node's start_app was given; \
         across a broker restart: 10 tokens before it, {left} \
         after; the first of 30 jobs started {:?} after start_app was given to the hosts' \
         nodes, then {rate:.2}/s past the burst ({per_second:?} in each second from the \
         first), at most {most} in any one second, at most {ahead:.1} ahead of 10·t",
        starts[0] - starting
    );
    probe::assert_within_burst_of_ten(ahead, most);
    // A job without a token comes back a step (1 s) later, so 30 jobs measure the rate
    // coarsely: enough to show the bucket refilled again.
    assert!(
        rate >= 5.0,
        "the bucket refills after the restart: {rate:.2}/s"
    );
    drop(hosts);
}
