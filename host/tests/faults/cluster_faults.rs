//! Scale-out and high availability on a three-node RabbitMQ cluster: two `jobhost run`
//! processes share the `ledger-quorum` fixture's quorum queues while a broker node is
//! stopped (`rabbitmqctl stop_app`), another is killed hard, one host is SIGKILLed and the
//! other hot-reloads a plugin. Every job completes or is dead-lettered by its own policy,
//! exactly as on one node, counted in a ledger kept apart from the hosts; none is lost,
//! and duplicates stay within what at-least-once allows.
//!
//! A broker failure the hosts cannot see gets the operator's remedy: when the ledger reads
//! nothing new for a while, a hold queue that strands expired messages (counted, but
//! neither ready nor unacknowledged) has its leader moved, and the table names that.
//!
//! Runs under `.ci/cluster-broker.sh`, which starts the cluster and sets
//! `JOBHOST_CLUSTER_AMQP` (and the node names, directory and `rabbitmqctl` the faults
//! need):
//!
//! ```text
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_faults:: -- --nocapture
//! ```
//!
//! It sends 20,000 jobs (`JOBHOST_FAULT_JOBS` sets another count): fewer finish before the
//! faults have landed on this machine.
//!
//! Without the cluster the test says so and passes, so that `cargo test --workspace` runs
//! on a machine with one broker; `JOBHOST_REQUIRE_CLUSTER=1` (set by `.ci/test`) makes a
//! missing cluster a failure instead.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::{RabbitMqBackend, RabbitMqOptions};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use crate::support;
use crate::support::faults::cluster::Cluster;
use crate::support::faults::ledger;
use crate::support::faults::ledger::{DeadLetter, Ledger, LedgerQueues, ledger_id, patience};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::{Row, Table};

/// Jobs by default: enough for every fault to land while jobs are still waiting, within a
/// couple of minutes.
const DEFAULT_JOBS: usize = 20_000;
/// The work queue's and the done queue's prefetch (the SDK's default).
const PREFETCH: usize = 16;
/// The ledger's policy: five attempts.
const MAX_ATTEMPTS: u32 = 5;

fn job_count() -> usize {
    std::env::var("JOBHOST_FAULT_JOBS").map_or(DEFAULT_JOBS, |value| {
        value
            .parse()
            .unwrap_or_else(|_| panic!("JOBHOST_FAULT_JOBS `{value}` is not a job count"))
    })
}

/// What job `index` does: every tenth fails once, every twenty-fifth defers once (1 s),
/// every hundredth fails all five attempts and is dead-lettered by its policy; the rest
/// succeed at once.
fn plan(index: usize) -> (u32, u32) {
    match index {
        i if i % 100 == 7 => (MAX_ATTEMPTS, 0),
        i if i % 25 == 3 => (0, 1),
        i if i % 10 == 0 => (1, 0),
        _ => (0, 0),
    }
}

/// Whether a host's log line says it settled jobs: a retry, a deferral, or a summary
/// with jobs completed.
fn settled_line(line: &str) -> bool {
    line.contains("job failed, retrying")
        || line.contains("job deferred")
        || (line.contains("jobs settled since the last summary") && !line.contains("completed=0 "))
}

/// How long the ledger may read nothing new, with outcomes missing, before the cluster's
/// hold queues are looked at for dead letters the broker stranded.
const STALL: Duration = Duration::from_secs(20);

/// What the scenario saw once every job had its outcome.
struct Outcomes {
    dead: Vec<DeadLetter>,
    /// The remedies the broker needed, as the table names them.
    remedies: Vec<String>,
}

/// Drain until every job of `completes` has a record and every job of `dies` a dead
/// letter, failing after `limit` with the depth of each queue, which tells a host that
/// stopped from a ledger that lags. A hold queue that strands expired messages gets the
/// operator's remedy.
async fn wait_for_every_outcome(
    cluster: &Cluster,
    host: &HostProcess,
    ledger: &mut Ledger,
    depth: &mut Depth,
    completes: &[u64],
    dies: &HashSet<u64>,
    limit: Duration,
) -> Outcomes {
    let deadline = tokio::time::Instant::now() + limit;
    let mut dead = Vec::new();
    let mut remedies = Vec::new();
    // The counts last seen to grow, and since when they have not.
    let (mut seen, mut since) = ((0, 0), tokio::time::Instant::now());
    loop {
        ledger.drain().await;
        dead.extend(ledger.take_dead());
        let dead_ids: HashSet<u64> = dead.iter().filter_map(|d| ledger_id(&d.body)).collect();
        let completed = ledger.completed(completes);
        if completed == completes.len() && dies.is_subset(&dead_ids) {
            return Outcomes { dead, remedies };
        }
        if (completed, dead.len()) != seen {
            (seen, since) = ((completed, dead.len()), tokio::time::Instant::now());
        } else if since.elapsed() >= STALL {
            let table = cluster.queue_table(2);
            let stranded = stranded(&table);
            eprintln!("nothing new for {STALL:?}; queues:\n{table}");
            for hold in stranded {
                // Node 3 is never faulted and node 1 is running again by now.
                let to = &cluster.nodes[if hold.leader == cluster.nodes[2] {
                    0
                } else {
                    2
                }];
                let said = cluster.move_leader(2, &hold.queue, to);
                eprintln!("{hold:?}: leader moved to {to}: {said}");
                remedies.push(format!(
                    "{} stranded {} dead letters, its leader moved ({said})",
                    hold.queue, hold.waiting
                ));
            }
            since = tokio::time::Instant::now();
        }
        if tokio::time::Instant::now() >= deadline {
            let (work, done) = (ledger.queues().work, ledger.queues().done);
            let (records, refused) = (format!("{done}.dead"), format!("{work}.dead"));
            let mut depths = Vec::new();
            for queue in [work, done, records.as_str(), refused.as_str()] {
                depths.push(format!("{queue} {}", depth.ready_of(queue).await));
            }
            let mut others = BTreeMap::<String, usize>::new();
            for letter in dead
                .iter()
                .filter(|d| ledger_id(&d.body).is_none_or(|id| !dies.contains(&id)))
            {
                let reason: String = letter.reason.chars().take(160).collect();
                *others.entry(reason).or_default() += 1;
            }
            panic!(
                "within {limit:?}: {completed} of {} jobs completed, {} of {} dead-lettered; \
                 ready: {}; dead letters the policy did not cause: {others:?}; every queue \
                 (name, messages, ready, unacknowledged, consumers, leader):\n{}\nthe host's last \
                 warnings:\n{}\nits log ends with:\n{}",
                completes.len(),
                dies.intersection(&dead_ids).count(),
                dies.len(),
                depths.join(", "),
                cluster.queue_table(2),
                host.last_matching(30, |l| {
                    (l.contains("WARN") || l.contains("ERROR")) && !l.contains("ledger record")
                }),
                host.tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_a_cluster_lose_no_job_to_a_stopped_node_a_killed_node_or_a_killed_host() {
    let Some(cluster) = Cluster::from_env().await else {
        return;
    };
    let jobs = job_count();
    let plugin_dir = || {
        let dir = tempfile::tempdir().expect("a plugin directory");
        std::fs::copy(
            jobhost_fixtures::wasm("ledger-quorum"),
            dir.path().join("ledger.wasm"),
        )
        .expect("the ledger plugin copies in");
        dir
    };
    let (dir_a, dir_b) = (plugin_dir(), plugin_dir());
    // Host A takes the nodes as a comma list, host B as one `--amqp` per node.
    // The ledger reads from the third node, which no fault touches.
    let queues = LedgerQueues::quorum(cluster.urls[2].clone());
    let mut host_a =
        HostProcess::start_on(dir_a.path(), &[&cluster.amqp], &[queues.work, queues.done]).await;
    let urls: Vec<&str> = cluster.urls.iter().map(String::as_str).collect();
    let host_b = HostProcess::start_on(dir_b.path(), &urls, &[queues.work, queues.done]).await;
    let b_started = host_b.line_count();
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let publisher = Arc::new(
        RabbitMqBackend::connect(
            &cluster.amqp,
            RabbitMqOptions::default().connection_name("cluster-faults-publisher"),
        )
        .await
        .expect("the publisher connects to the cluster"),
    );

    let ids = ledger::fresh_ids(jobs);
    let (mut completes, mut dies) = (Vec::new(), HashSet::new());
    let envelopes = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let (fail_times, defer_times) = plan(i);
            if fail_times >= MAX_ATTEMPTS {
                dies.insert(id);
            } else {
                completes.push(id);
            }
            ledger::work_on(queues.work, id, fail_times, defer_times)
        })
        .collect();
    let publishing = tokio::spawn({
        let publisher = publisher.clone();
        async move { ledger::publish_all(&publisher, envelopes).await }
    });

    let limit = patience(jobs) * 2;
    within_publish(publishing).await;
    // Each fault lands once the work queue is down to a share of the batch: read from the
    // queue's depth, which is exact, where the ledger lags behind the hosts.
    let mut depth = Depth::open(&cluster.urls[2], queues.work).await;
    let share = |percent: usize| u32::try_from(jobs * percent / 100).unwrap_or(u32::MAX);
    let mut faults = Vec::new();

    // A hot reload on host A while both work: a second plugin appears in its directory only.
    std::fs::copy(
        jobhost_fixtures::wasm("noop"),
        dir_a.path().join("noop.wasm"),
    )
    .expect("the noop plugin copies in");
    host_a
        .wait_for_line(0, Duration::from_secs(120), |l| {
            l.contains("plugin loaded") && l.contains("plugin=noop")
        })
        .await;
    faults.push(format!("host A reloads ({} left)", depth.ready().await));

    let left = depth.wait_until_at_most(share(85), limit).await;
    let before_stop = host_a.line_count();
    cluster.ctl(0, &["stop_app"]);
    faults.push(format!("node 1 stop_app ({left} left)"));

    // Host A dies once it is back at work after the stop: a retry or deferral it logs
    // (one job in ten retries), or a summary with jobs completed. Not on its summary
    // alone, because on a quick machine the queue can drain within its 10 s.
    host_a.wait_for_line(before_stop, limit, settled_line).await;
    let left = depth.ready().await;
    host_a.kill();
    let a_completed = host_a.completions();
    let a_settled = host_a.lines_since(0, settled_line);
    // Mid-run by the ledger, not by the work queue, which hosts that keep up with the
    // publisher hold near empty while retries and deferrals are still on their way.
    ledger.drain().await;
    let recorded = ledger.completed(&completes);
    faults.push(format!(
        "host A SIGKILLed ({left} left, {recorded} recorded)"
    ));
    assert!(
        recorded < completes.len(),
        "host A dies mid-run: every job was recorded already (raise JOBHOST_FAULT_JOBS)"
    );

    let left = depth.ready().await;
    cluster.ctl(0, &["start_app"]);
    cluster.ctl(0, &["await_startup"]);
    faults.push(format!("node 1 started again ({left} left)"));

    let left = depth.wait_until_at_most(share(50), limit).await;
    cluster
        .await_not_quorum_critical(1, Duration::from_secs(120))
        .await;
    cluster.kill(1);
    // Records only grow: fewer than all after the kill means the fleet was still at work.
    ledger.drain().await;
    let recorded = ledger.completed(&completes);
    faults.push(format!("node 2 killed ({left} left, {recorded} recorded)"));
    assert!(
        recorded < completes.len(),
        "the last fault lands mid-run: every job was recorded already (raise JOBHOST_FAULT_JOBS)"
    );

    let Outcomes { dead, remedies } = wait_for_every_outcome(
        &cluster,
        &host_b,
        &mut ledger,
        &mut depth,
        &completes,
        &dies,
        patience(jobs),
    )
    .await;
    let b_completed = host_b.completions();
    let released = host_a.released_overdue() + host_b.released_overdue();

    // The table names the remedies beside the faults, so a run that needed one says so.
    let events: Vec<String> = faults.iter().chain(&remedies).cloned().collect();
    let row = row(&ledger, &ids, &completes, &dead, &events);
    let table = Table(vec![row]);
    println!("\n{table}");
    let row = &table.0[0];
    println!(
        "host A completed {a_completed}+ jobs before its kill, host B {b_completed}+ (from their \
         10 s summaries)"
    );
    println!(
        "held messages the broker kept past their delay, released by the hosts' sweepers: \
         {released}"
    );

    let dead_ids: HashSet<u64> = dead.iter().filter_map(|d| ledger_id(&d.body)).collect();
    assert_eq!(
        dead_ids, dies,
        "exactly the jobs whose policy gives up are dead-lettered"
    );
    for letter in &dead {
        assert!(
            letter.reason.starts_with(&format!(
                "max attempts ({MAX_ATTEMPTS}) exhausted after attempt {MAX_ATTEMPTS}: job failed (retryable): job "
            )),
            "dead-lettered by its own policy: {}",
            letter.reason
        );
    }
    assert_eq!(
        ledger.completed(&completes),
        completes.len(),
        "every other job completes"
    );
    assert!(a_settled > 0, "host A shared the work");
    assert!(
        host_b.lines_since(b_started, |l| l.contains("plugin loaded")) == 0,
        "host A's reload does not touch host B"
    );
    // Each fault may redeliver what each host held unacked on both queues, and make the
    // publisher send its in-flight jobs again.
    let duplicated = row.duplicated;
    let bound = faults.len() * (2 * 2 * PREFETCH + 64);
    assert!(
        duplicated <= bound,
        "{duplicated} duplicates, more than at-least-once explains ({bound})"
    );
}

/// A hold queue holding messages that are neither ready nor unacknowledged: dead letters
/// waiting for a worker.
#[derive(Debug)]
struct Stranded {
    queue: String,
    waiting: u64,
    leader: String,
}

/// The hold queues of a [`Cluster::queue_table`] that strand messages.
fn stranded(table: &str) -> Vec<Stranded> {
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            let [queue, messages, ready, unacked, _consumers, leader] = fields[..] else {
                return None;
            };
            let count = |field: &str| field.parse::<u64>().ok();
            let waiting = count(messages)?.checked_sub(count(ready)? + count(unacked)?)?;
            (queue.contains(".deferred.") && waiting > 0).then(|| Stranded {
                queue: queue.to_owned(),
                waiting,
                leader: leader.to_owned(),
            })
        })
        .collect()
}

/// Queue depths, read on a node no fault touches.
struct Depth {
    url: String,
    channel: lapin::Channel,
    /// The work queue.
    work: &'static str,
}

impl Depth {
    async fn open(url: &str, work: &'static str) -> Self {
        Self {
            url: url.to_owned(),
            work,
            channel: support::raw_channel_at(url).await,
        }
    }

    /// Ready jobs on the work queue.
    async fn ready(&mut self) -> u32 {
        self.ready_of(self.work).await
    }

    /// Ready messages on `queue`; a read the broker fails (a leader election) is made again
    /// on a new connection.
    async fn ready_of(&mut self, queue: &str) -> u32 {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        loop {
            match self
                .channel
                .queue_declare(queue.into(), passive, FieldTable::default())
                .await
            {
                Ok(queue) => return queue.message_count(),
                Err(error) => {
                    eprintln!("depth: reading `{queue}` failed ({error}); reading again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    self.channel = support::raw_channel_at(&self.url).await;
                }
            }
        }
    }

    /// Wait until at most `left` jobs are ready, failing after `limit`; returns how many are.
    async fn wait_until_at_most(&mut self, left: u32, limit: Duration) -> u32 {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ready = self.ready().await;
            if ready <= left {
                return ready;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the work queue still holds {ready} jobs after {limit:?}, waiting for {left}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn within_publish(publishing: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(600), publishing)
        .await
        .expect("the jobs are published within 10 minutes")
        .expect("the publisher does not panic");
}

/// The scenario's row: its dead letters grouped by their reason without the job's id, and
/// duplicates counted among both the completion records and the dead letters.
fn row(
    ledger: &Ledger,
    ids: &[u64],
    completes: &[u64],
    dead: &[DeadLetter],
    faults: &[String],
) -> Row {
    let mut by_reason = BTreeMap::new();
    let mut seen = HashSet::new();
    for letter in dead {
        if !ledger_id(&letter.body).is_some_and(|id| seen.insert(id)) {
            continue;
        }
        let reason = letter
            .reason
            .split(" fails attempt")
            .next()
            .map(|head| head.trim_end_matches(|c: char| c.is_ascii_digit()))
            .unwrap_or_default();
        *by_reason
            .entry(format!("{reason}N fails attempt {MAX_ATTEMPTS} on purpose"))
            .or_default() += 1;
    }
    Row {
        sent: ids.len(),
        completed: ledger.completed(completes),
        duplicated: ledger.row("", ids, &[]).duplicated + (dead.len() - seen.len()),
        dead: by_reason,
        ..Row::new(format!(
            "cluster: 3 nodes, quorum queues, 2 hosts; {}",
            faults.join(", ")
        ))
    }
}

#[test]
fn a_hold_queue_that_counts_messages_neither_ready_nor_unacknowledged_strands_them() {
    // As `rabbitmqctl list_queues` printed it in a run that stranded 1,400 retries.
    let table = "name\tmessages\tmessages_ready\tmessages_unacknowledged\tconsumers\tleader\n\
                 test.qledger.done\t0\t0\t0\t1\tjh3@localhost\n\
                 test.qledger.work\t12\t4\t8\t1\tjh3@localhost\n\
                 test.qledger.work.deferred.1000\t1400\t0\t0\t0\tjh1@localhost\n\
                 test.qledger.work.deferred.2000\t5\t3\t2\t0\tjh3@localhost\n\
                 test.noop\t0\t0\t0\t0\t\n";
    let stranded = stranded(table);
    assert_eq!(stranded.len(), 1, "{stranded:?}");
    assert_eq!(stranded[0].queue, "test.qledger.work.deferred.1000");
    assert_eq!(stranded[0].waiting, 1400);
    assert_eq!(stranded[0].leader, "jh1@localhost");
}
