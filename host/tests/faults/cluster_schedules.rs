//! Exactly one firing per tick through a restart of the whole broker (issue 38, and the
//! row "the broker restarts" of docs/schedules.md, "What exactly one firing per tick
//! means"), on the three-node cluster of `.ci/cluster-broker.sh`.
//!
//! Two `jobhost run` hosts, given every node, fire a one-second schedule whose `missed`
//! policy catches up [`CATCH_UP`] ticks; the broker restarts under them (every node's
//! `stop_app`, [`OUTAGE`] with every node down, then `start_app` on all) and they fire
//! on. The schedule enqueues `ledger.Done` of the `ledger-quorum` fixture, which the hosts
//! dead-letter at once, the body byte for byte, onto the quorum queue
//! `test.qledger.done.dead`: the test's own reader there, on node 3, is the ledger, kept
//! apart from the hosts. It counts **firings**, not runs: a tick's job id is the same on
//! every host, and a firing's envelope carries the instant it was made, so a redelivered
//! record (the job run again after a lost acknowledgement) is the same firing, and a tick
//! fired twice shows two.
//!
//! What it asserts: no tick fired twice; every tick from the first through the last fired
//! before every node was down fired, and every one from the first fired after the restart
//! through the last; the outage's ticks between them, which no host fired, are as many as
//! the new leader logged letting go (so the ones let go are the oldest); and of the ticks
//! fired late no more than [`CATCH_UP`] were over [`ON_TIME`] old when the new leader
//! looked (younger ones fire late by design).
//!
//! Without the cluster it says so and passes; `JOBHOST_REQUIRE_CLUSTER=1` (set by
//! `.ci/test`) makes that a failure. About a minute:
//!
//! ```text
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_schedules:: -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use jobhost::broker::{RabbitMqBackend, RabbitMqOptions, Schedules, tick_job_id};
use jobhost::envelope::Envelope;
use jobhost::schedule::ON_TIME;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, Consumer};
use uuid::Uuid;

use crate::support::cli::{Host, STARTUP, jobhost, logs, logs_after, write_grants};
use crate::support::faults::cluster::Cluster;
use crate::support::faults::ledger::LedgerQueues;
use crate::support::unique;

/// How many missed ticks the schedule catches up: fewer than the outage lasts, so that
/// the policy shows.
const CATCH_UP: i64 = 3;

/// The schedule's spacing: `every = "1s"`.
const SPACING_MS: i64 = 1000;

/// How long hosts may take to come back after the restart, and the ledger to see a tick.
const PATIENCE: Duration = Duration::from_secs(60);

/// How long every node stays stopped.
const OUTAGE: Duration = Duration::from_secs(10);

/// A day, in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// How long the fleet fires before the restart, and again after it.
const FIRING: Duration = Duration::from_secs(8);

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_millis()).expect("in range")
}

fn grants_text(schedule: &str, enabled: bool) -> String {
    format!(
        "[schedules.\"{schedule}\"]\njob_type = \"ledger.Done\"\nevery = \"1s\"\n\
         payload = {{ id = 1 }}\nmissed = {{ catch_up = {CATCH_UP} }}\nenabled = {enabled}\n"
    )
}

/// `jobhost run --amqp NODES --plugins DIR --config GRANTS`, DIR holding the
/// `ledger-quorum` fixture, once it consumes the fixture's done queue.
fn schedule_host(amqp: &str, queues: &LedgerQueues, grants: &Path) -> Host {
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("ledger-quorum"),
        dir.path().join("ledger.wasm"),
    )
    .expect("the fixture copies into the plugin directory");
    let mut command = jobhost();
    command
        .args(["run", "--amqp", amqp, "--plugins"])
        .arg(dir.path())
        .arg("--config")
        .arg(grants);
    let host = tokio::task::block_in_place(|| Host::spawn(command, dir, STARTUP));
    logs(
        &host,
        STARTUP,
        &["consuming", &format!("queue={} ", queues.done)],
    );
    host
}

/// How many lines each of `hosts` logged so far.
fn marks(hosts: &[Host]) -> Vec<usize> {
    hosts.iter().map(Host::line_count).collect()
}

/// The lines `hosts` logged after `marks` that contain `what`.
fn lines_after(hosts: &[Host], marks: &[usize], what: &str) -> Vec<String> {
    hosts
        .iter()
        .zip(marks)
        .flat_map(|(host, &skip)| host.log_lines().into_iter().skip(skip))
        .filter(|line| line.contains(what))
        .collect()
}

/// When a console line was logged, in milliseconds since the Unix epoch: its time of day
/// (UTC, to the millisecond) on the day of `near_ms`.
fn logged_at(line: &str, near_ms: i64) -> i64 {
    let time = line.split_whitespace().next().unwrap_or_default();
    let parts: Vec<i64> = time
        .split([':', '.'])
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("a time in {line:?}"))
        })
        .collect();
    let [hours, minutes, seconds, millis] = parts[..] else {
        panic!("a time of HH:MM:SS.mmm in {line:?}")
    };
    let of_day = ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis;
    let at = near_ms - near_ms.rem_euclid(DAY_MS) + of_day;
    // A line of just before midnight read just after it.
    if at > near_ms + DAY_MS / 2 {
        at - DAY_MS
    } else {
        at
    }
}

/// The test's reader of the records (the done queue's dead letters): each job id's
/// firings, told apart by the instant their envelope was made.
struct Firings {
    url: String,
    queue: String,
    reader: Option<(Connection, Consumer)>,
    by_job: HashMap<Uuid, BTreeSet<u64>>,
    runs: HashMap<Uuid, usize>,
}

impl Firings {
    fn new(queues: &LedgerQueues) -> Self {
        Self {
            url: queues.url.clone(),
            queue: format!("{}.dead", queues.done),
            reader: None,
            by_job: HashMap::new(),
            runs: HashMap::new(),
        }
    }

    /// Take in what the broker delivers now. A read the broker fails (its restart) is
    /// given up and its connection closed: what was not acknowledged comes again.
    async fn drain(&mut self) {
        if let Err(error) = self.try_drain().await {
            eprintln!("ledger: reading failed ({error}); reading on through a new connection");
            if let Some((connection, _)) = self.reader.take() {
                let closing = connection.close(200, "the ledger reconnects".into());
                let _ = tokio::time::timeout(Duration::from_secs(5), closing).await;
            }
        }
    }

    async fn try_drain(&mut self) -> Result<(), String> {
        if self.reader.is_none() {
            let opened = async {
                let connection =
                    Connection::connect(&self.url, ConnectionProperties::default()).await?;
                let channel = connection.create_channel().await?;
                channel.basic_qos(1_000, BasicQosOptions::default()).await?;
                let consumer = channel
                    .basic_consume(
                        self.queue.as_str().into(),
                        "schedule-ledger".into(),
                        BasicConsumeOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
                Ok::<_, lapin::Error>((connection, consumer))
            };
            self.reader = Some(opened.await.map_err(|error| error.to_string())?);
        }
        let (_, consumer) = self.reader.as_mut().expect("opened above");
        while let Ok(next) = tokio::time::timeout(Duration::from_millis(200), consumer.next()).await
        {
            let delivery = next
                .ok_or("the consumer ended")?
                .map_err(|error| error.to_string())?;
            if let Ok(envelope) = Envelope::decode(&delivery.data) {
                self.by_job
                    .entry(envelope.job_id)
                    .or_default()
                    .insert(envelope.enqueued_at_ms);
                *self.runs.entry(envelope.job_id).or_default() += 1;
            }
            delivery
                .acker
                .ack(BasicAckOptions::default())
                .await
                .map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    /// Drain until `done` holds, failing after `limit` naming `what`.
    async fn until(&mut self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            self.drain().await;
            if done(self) {
                return;
            }
            assert!(Instant::now() < deadline, "{what} within {limit:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each tick of `ticks` the ledger saw, with the instants its firings were made.
    fn per_tick(&self, schedule: &str, ticks: &[i64]) -> BTreeMap<i64, Vec<i64>> {
        ticks
            .iter()
            .filter_map(|&tick| {
                let made = self.by_job.get(&tick_job_id(schedule, tick))?;
                let made = made.iter().map(|&ms| i64::try_from(ms).expect("in range"));
                Some((tick, made.collect()))
            })
            .collect()
    }

    /// Whether the ledger saw a firing made after `after_ms`.
    fn any_made_after(&self, after_ms: i64) -> bool {
        self.by_job
            .values()
            .flatten()
            .any(|&ms| i64::try_from(ms).is_ok_and(|ms| ms > after_ms))
    }
}

/// The ticks in `from..=to`.
fn ticks_through(from: i64, to: i64) -> Vec<i64> {
    (from..=to).step_by(1000).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_fires_each_tick_once_through_a_broker_restart_and_catches_up_by_its_missed_policy()
{
    let Some(cluster) = Cluster::from_env().await else {
        return;
    };
    let urls = cluster.vhost("schedules");
    // The ledger reads on node 3; the hosts try the nodes in order, so they use node 1,
    // where the leader queue, the history and the tick locks are then.
    let queues = LedgerQueues::quorum(urls[2].clone());
    let amqp = urls.join(",");
    let schedule = unique("restart");
    let config = tempfile::tempdir().expect("a config directory");
    let grants = config.path().join("jobhost.toml");
    write_grants(&grants, &grants_text(&schedule, true));
    let began_ms = now_ms();
    let hosts = [
        schedule_host(&amqp, &queues, &grants),
        schedule_host(&amqp, &queues, &grants),
    ];
    let mut ledger = Firings::new(&queues);
    ledger
        .until(PATIENCE, "a first firing", |l| !l.by_job.is_empty())
        .await;
    tokio::time::sleep(FIRING).await;
    ledger.drain().await;

    // The broker restarts under the hosts.
    let before = marks(&hosts);
    let stopping_ms = now_ms();
    cluster.stop_all();
    let stopped_ms = now_ms();
    // Down for longer than the catch-up and the ticks still on time, so the policy shows.
    tokio::time::sleep(OUTAGE).await;
    let starting_ms = now_ms();
    cluster.start(&[0, 1, 2]).await;
    let started_ms = now_ms();
    ledger
        .until(PATIENCE, "a firing after the restart", |l| {
            l.any_made_after(starting_ms)
        })
        .await;
    tokio::time::sleep(FIRING).await;

    // Disabled by a reload, so that nothing fires after the ticks counted.
    let reloading = marks(&hosts);
    write_grants(&grants, &grants_text(&schedule, false));
    for (host, &skip) in hosts.iter().zip(&reloading) {
        logs_after(host, skip, STARTUP, &["grants loaded"]);
    }
    // A round that began before the reload may still fire once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ended_ms = now_ms();
    let history = RabbitMqBackend::connect(
        &urls[2],
        RabbitMqOptions::default().connection_name("schedule-history"),
    )
    .await
    .expect("a connection to node 3");
    let last_fired = history
        .firings(&schedule)
        .await
        .expect("the history reads")
        .iter()
        .map(|firing| firing.tick_ms)
        .max()
        .expect("some tick was recorded");
    history.close().await;
    let every_tick = ticks_through(began_ms / 1000 * 1000, ended_ms / 1000 * 1000);
    ledger
        .until(PATIENCE, "the last tick recorded in the history", |l| {
            l.by_job.contains_key(&tick_job_id(&schedule, last_fired))
        })
        .await;
    let fired = ledger.per_tick(&schedule, &every_tick);
    let first_fired = *fired.keys().next().expect("some tick fired");
    let made = |tick: i64| fired[&tick][0];
    let unfired = |from: i64, to: i64| -> Vec<i64> {
        ticks_through(from, to)
            .into_iter()
            .filter(|tick| !fired.contains_key(tick))
            .collect()
    };
    // Before the restart: every tick from the first through the last fired before every
    // node was down (the fleet fires on while node 1, which it uses, stops).
    let last_before = *fired
        .keys()
        .filter(|&&tick| made(tick) < starting_ms)
        .max()
        .expect("ticks fired before the restart");
    // After it: every tick from the first fired after the restart through the last.
    let after: Vec<i64> = fired
        .keys()
        .copied()
        .filter(|&tick| made(tick) > starting_ms)
        .collect();
    let first_after = *after.first().expect("ticks fired after the restart");
    let first_made_after = after.iter().map(|&tick| made(tick)).min().expect("some");
    // The outage: the ticks in between, which no host fired; the new leader logs how many
    // it let go, and when it led again (before it looked at what was due).
    let let_go = (first_after - last_before) / SPACING_MS - 1;
    let logged_let_go: i64 = lines_after(&hosts, &before, "ticks no host fired in time")
        .iter()
        .filter(|line| line.contains(&schedule))
        .map(|line| {
            let count = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("missed="))
                .unwrap_or_else(|| panic!("a count of ticks let go in {line:?}"));
            count.parse::<i64>().expect("a count")
        })
        .sum();
    let looked_ms = lines_after(&hosts, &before, "this host leads the schedulers")
        .iter()
        .map(|line| logged_at(line, stopping_ms))
        .filter(|&at| at > starting_ms)
        .min();
    let on_time_ms = i64::try_from(ON_TIME.as_millis()).expect("in range");
    // Fired late: the ticks already past when the first firing after the restart was made;
    // caught up: those of them over ON_TIME old when the new leader looked.
    let late: Vec<i64> = after
        .iter()
        .copied()
        .filter(|&tick| tick < first_made_after)
        .collect();
    let caught_up = looked_ms.map(|looked| {
        late.iter()
            .filter(|&&tick| tick <= looked - on_time_ms)
            .count()
    });
    let lateness: Vec<i64> = late.iter().map(|&tick| made(tick) - tick).collect();
    let by_firings = fired
        .values()
        .fold(BTreeMap::<usize, usize>::new(), |mut by, made| {
            *by.entry(made.len()).or_default() += 1;
            by
        });
    let by_runs = ledger
        .runs
        .values()
        .fold(BTreeMap::<usize, usize>::new(), |mut by, &runs| {
            *by.entry(runs).or_default() += 1;
            by
        });
    let run_again: Vec<i64> = fired
        .keys()
        .copied()
        .filter(|&tick| ledger.runs[&tick_job_id(&schedule, tick)] > 1)
        .collect();
    // What the hosts said of the lead and the firings from the restart on.
    let said = [
        "leads the schedulers",
        "fired",
        "let go",
        "reconnected to the broker",
    ];
    for (index, host) in hosts.iter().enumerate() {
        for line in host.log_lines().iter().skip(before[index]) {
            if said.iter().any(|what| line.contains(what)) {
                println!("host {index}: {line}");
            }
        }
    }
    let timeline: Vec<String> = ticks_through(first_fired, last_fired)
        .iter()
        .map(|tick| match fired.get(tick) {
            Some(made) => format!("{}:{:?}", tick / 1000 % 100, made),
            None => format!("{}:-", tick / 1000 % 100),
        })
        .collect();
    println!("ticks (second of the minute: instants their firings were made):\n{timeline:?}");
    println!(
        "schedule {schedule}, every 1s, missed = {{ catch_up = {CATCH_UP} }}, on two hosts: \
         {} ticks fired from {first_fired} to {last_fired} (ticks by how many firings: \
         {by_firings:?}; by how many runs of their job: {by_runs:?}, run again {run_again:?}); \
         {} ticks fired before \
         the restart, the last {last_before} (fired {} ms after the nodes began to stop); \
         stop_app on every node took {} ms, the nodes stayed down {} ms more, start_app took \
         {} ms; a host led again {:?} ms after start_app was given, the first firing after the restart was made {} ms after it ({} ms after \
         the nodes began to stop); of the outage's ticks {let_go} were let go (the new leader \
         logged {logged_let_go}), then {} fired late, oldest first, {caught_up:?} of them over \
         {on_time_ms} ms old when the new leader looked (lateness in ms: {lateness:?}); {} \
         ticks fired after the restart in all, from {first_after}",
        fired.len(),
        ticks_through(first_fired, last_before).len(),
        made(last_before) - stopping_ms,
        stopped_ms - stopping_ms,
        starting_ms - stopped_ms,
        started_ms - starting_ms,
        looked_ms.map(|looked| looked - starting_ms),
        first_made_after - starting_ms,
        first_made_after - stopping_ms,
        late.len(),
        after.len(),
    );

    let twice: Vec<_> = fired.iter().filter(|(_, made)| made.len() > 1).collect();
    assert!(twice.is_empty(), "no tick fires twice: {twice:?}");
    assert_eq!(
        ledger.by_job.len(),
        fired.len(),
        "every firing is of a tick of the run"
    );
    assert!(
        fired.keys().all(|&tick| tick <= last_fired),
        "nothing fired after the last tick the history records ({last_fired})"
    );
    let unfired_before = unfired(first_fired, last_before);
    assert!(
        unfired_before.is_empty(),
        "every tick before the restart fired: {unfired_before:?} did not"
    );
    assert!(
        last_before >= stopping_ms - 2 * SPACING_MS,
        "the fleet fired up to the restart: its last tick {last_before}, the nodes stopping at \
         {stopping_ms}"
    );
    let unfired_after = unfired(first_after, last_fired);
    assert!(
        unfired_after.is_empty(),
        "every tick after the hosts reconnected fired: {unfired_after:?} did not"
    );
    assert_eq!(
        let_go, logged_let_go,
        "the ticks no host fired are the ones the new leader let go"
    );
    let caught_up = caught_up.expect("a host logged that it led again after the restart");
    assert!(
        caught_up <= CATCH_UP as usize,
        "at most {CATCH_UP} missed ticks fire late: {caught_up}"
    );
    assert!(
        let_go > 0 && caught_up > 0,
        "the outage outlasted the catch-up, so the policy both let ticks go and caught some \
         up: {let_go} let go, {caught_up} caught up"
    );
}
