//! A one-second schedule fired by a fleet of two `jobhost run` processes on the test
//! broker: the leader is SIGKILLed midway and started again, and a ledger kept apart from
//! the hosts counts the firings per tick by job id (each tick's job id is deterministic):
//! exactly one per tick, none missed.
//!
//! The schedule enqueues `ledger.Done` of the `ledger` fixture, which the hosts
//! dead-letter at once onto the fixture's done queue's dead letters, the body byte for
//! byte: the ledger reads the job ids there, acknowledging this run's records (payload `id`
//! of its own) and handing back, when it closes, any other.
//!
//! Needs the RabbitMQ broker at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! without one it fails, unless `JOBHOST_SKIP_BROKER_TESTS=1` asks to skip it. The fleet
//! runs in the ledger fixture's virtual host of its own, so no other host on the broker
//! competes for its lead; the fixture's queues, the schedule's history queue, its tick
//! locks and the leader queue are deleted with it after.
//!
//! ```text
//! cargo test -p jobhost --test rabbitmq rabbitmq_schedule:: -- --nocapture
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use jobhost::broker::{Schedules, tick_job_id};
use jobhost::envelope::Envelope;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use uuid::Uuid;

use crate::support;
use crate::support::cli::{Host, STARTUP, json_of, stdout_of, write_grants};
use crate::support::faults::ledger::LedgerQueues;
use crate::support::unique;

/// How many missed ticks the schedule catches up: more than a takeover takes.
const CATCH_UP: u32 = 10;

fn grants_text(schedule: &str, id: u64, enabled: bool) -> String {
    format!(
        "[schedules.\"{schedule}\"]\njob_type = \"ledger.Done\"\nevery = \"1s\"\n\
         payload = {{ id = {id} }}\nmissed = {{ catch_up = {CATCH_UP} }}\nenabled = {enabled}\n"
    )
}

/// The index of the host among `hosts` that logs first that it leads, within `limit`.
fn leader(hosts: &[&Host], limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(index) = hosts.iter().position(|host| {
            host.log_lines()
                .iter()
                .any(|l| l.contains("this host leads the schedulers"))
        }) {
            return index;
        }
        assert!(Instant::now() < deadline, "no host led within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_millis()).expect("in range")
}

/// The test's own reader of the ledger fixture's records (the done queue's dead letters):
/// this run's job ids, counted.
struct Ledger {
    channel: Channel,
    consumer: Consumer,
    id: u64,
    jobs: HashMap<Uuid, usize>,
}

impl Ledger {
    async fn open(queues: &LedgerQueues, id: u64) -> Self {
        let channel = queues.raw_channel().await;
        channel
            .basic_qos(10_000, BasicQosOptions::default())
            .await
            .expect("qos");
        let consumer = channel
            .basic_consume(
                format!("{}.dead", queues.done).as_str().into(),
                unique("schedule-ledger").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("the ledger consumes the records");
        Self {
            channel,
            consumer,
            id,
            jobs: HashMap::new(),
        }
    }

    /// Take what is delivered now; another run's records stay unacked until the ledger
    /// closes, which hands them back.
    async fn drain(&mut self) {
        while let Ok(Some(delivery)) =
            tokio::time::timeout(Duration::from_millis(200), self.consumer.next()).await
        {
            let delivery = delivery.expect("a delivery");
            let Ok(envelope) = Envelope::decode(&delivery.data) else {
                continue;
            };
            let payload: serde_json::Value =
                serde_json::from_str(envelope.payload.get()).unwrap_or_default();
            if payload["id"].as_u64() == Some(self.id) {
                *self.jobs.entry(envelope.job_id).or_default() += 1;
                delivery
                    .acker
                    .ack(BasicAckOptions::default())
                    .await
                    .expect("ack");
            }
        }
    }

    /// Drain until every tick of `ticks` has a record, failing after `limit`.
    async fn wait_for(&mut self, schedule: &str, ticks: &[i64], limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            self.drain().await;
            let missing = ticks
                .iter()
                .filter(|t| !self.jobs.contains_key(&tick_job_id(schedule, **t)))
                .count();
            if missing == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{missing} of {} ticks have no record within {limit:?}",
                ticks.len()
            );
        }
    }

    async fn close(self) {
        let _ = self.channel.close(200, "ledger done".into()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_fires_each_tick_once_through_a_sigkill_of_its_leader_and_a_restart() {
    if support::backend(&unique("schedule-probe")).await.is_none() {
        return;
    }
    let _alone = support::HEAVY.lock().await;
    let schedule = unique("sched");
    let id = u64::from(rand::random::<u32>()) << 24;
    let config = tempfile::tempdir().expect("a config directory");
    let grants = config.path().join("jobhost.toml");
    write_grants(&grants, &grants_text(&schedule, id, true));
    // The fixture's queues, which the hosts declare, and the schedule's history queue, tick
    // locks and leader queue, in a virtual host of their own: no fleet but this test's
    // competes for the lead. Dropped after the hosts are.
    let queues = LedgerQueues::classic();
    let started_ms = now_ms();

    let mut hosts = vec![
        Host::on_broker("ledger", &queues.url, Some(&grants)),
        Host::on_broker("ledger", &queues.url, Some(&grants)),
    ];
    // After the hosts, which declare the fixture's queues.
    let mut ledger = Ledger::open(&queues, id).await;
    let first = leader(&[&hosts[0], &hosts[1]], Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(10)).await;
    // SIGKILL: no resign, the lead ends with the connection.
    let killed_ms = now_ms();
    let mut killed = hosts.remove(first);
    tokio::task::block_in_place(|| killed.signal("KILL", Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_secs(8)).await;
    hosts.push(Host::on_broker("ledger", &queues.url, Some(&grants)));
    tokio::time::sleep(Duration::from_secs(8)).await;

    // What `jobhost schedules` (GET /schedules) shows of it now.
    let listed = tokio::task::block_in_place(|| json_of(&hosts[0].cli(&["schedules", "--json"])));
    let view = listed
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == schedule.as_str()))
        .unwrap_or_else(|| panic!("the schedule is listed: {listed}"));
    assert_eq!(view["every_ms"], 1000, "{view}");
    assert_eq!(view["missed"], format!("catch_up {CATCH_UP}"), "{view}");
    assert!(view["next_ms"].as_i64() > Some(now_ms() - 1000), "{view}");
    let firings = view["firings"].as_array().expect("firings");
    assert_eq!(firings.len(), 10, "the last 10 firings: {view}");
    let newest = &firings[0];
    assert!(
        newest["tick_ms"].as_i64() > firings[9]["tick_ms"].as_i64(),
        "newest first: {view}"
    );
    assert_eq!(
        newest["job_id"],
        tick_job_id(&schedule, newest["tick_ms"].as_i64().expect("a tick")).to_string(),
        "{view}"
    );
    // How each firing's job ended, recorded by whichever host ran it: the older half are
    // seconds old, and a ledger job takes milliseconds. `ledger.Done` is always fatal, so
    // that its dead letters are the ledger.
    for firing in &firings[5..] {
        assert_eq!(firing["ended"]["outcome"], "dead-lettered", "{view}");
        assert_eq!(firing["ended"]["job_id"], firing["job_id"], "{view}");
    }
    let table = tokio::task::block_in_place(|| stdout_of(&hosts[0].cli(&["schedules"])));
    assert!(
        table.contains(&schedule)
            && table.contains("every 1s")
            && table.contains("last firings, newest first")
            && table.contains("dead-lettered on attempt 1"),
        "{table}"
    );

    // Disabled by a reload, so nothing fires after the ticks counted.
    let seen: Vec<usize> = hosts.iter().map(Host::line_count).collect();
    write_grants(&grants, &grants_text(&schedule, id, false));
    for (host, skip) in hosts.iter().zip(seen) {
        tokio::task::block_in_place(|| {
            host.wait_for_line_after(skip, STARTUP, |l| l.contains("grants loaded"))
        });
    }
    let stopped_ms = now_ms();
    for host in hosts.iter().chain([&killed]) {
        for line in host.log_lines() {
            if line.contains("schedul") || line.contains("tick") {
                println!("host {}: {line}", host.pid());
            }
        }
    }
    // The span to count: from the first tick the ledger saw to the last the broker's
    // history records (records of the last ticks may still be on their way).
    let reader = queues.backend(&unique("schedule-history")).await;
    let last_fired = reader
        .firings(&schedule)
        .await
        .expect("the history reads")
        .iter()
        .map(|firing| firing.tick_ms)
        .max()
        .expect("some tick was recorded");
    reader.close().await;
    let fired: Vec<i64> = (started_ms / 1000..=stopped_ms / 1000)
        .map(|s| s * 1000)
        .collect();
    ledger.drain().await;
    let first_fired = *fired
        .iter()
        .find(|t| ledger.jobs.contains_key(&tick_job_id(&schedule, **t)))
        .expect("some tick fired");
    let span: Vec<i64> = fired
        .iter()
        .copied()
        .filter(|t| (first_fired..=last_fired).contains(t))
        .collect();
    ledger
        .wait_for(&schedule, &span, Duration::from_secs(30))
        .await;
    let counts: BTreeMap<i64, usize> = span
        .iter()
        .map(|t| (*t, ledger.jobs[&tick_job_id(&schedule, *t)]))
        .collect();
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "schedule {schedule}: {} ticks from {first_fired} to {last_fired} fired by the fleet, \
         the leader killed at {killed_ms}; fired twice: {}",
        span.len(),
        twice.len()
    );
    assert!(twice.is_empty(), "no tick fires twice: {twice:?}");
    assert!(
        first_fired < killed_ms && last_fired > killed_ms + 12_000,
        "ticks fired before the kill and after the restart"
    );
    assert_eq!(
        ledger.jobs.len(),
        span.len(),
        "every record is of a tick in the span"
    );

    for mut host in hosts {
        tokio::task::block_in_place(|| host.interrupt(Duration::from_secs(30)));
    }
    ledger.close().await;
}
