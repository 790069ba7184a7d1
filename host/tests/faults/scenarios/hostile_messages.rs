//! Hostile messages and plugins against a running `jobhost run` process, published by a
//! plain AMQP client (no jobhost code): a 200 KB job type, a payload whose decode error
//! quotes a 200 KB string, an envelope naming an undeclared queue that fails once, an
//! impossible deferral through the test plugin `scripted`, a plugin flooding host
//! calls and one blocking in `manifest()`, with ordinary jobs behind them. Each hostile
//! message ends in its `.dead` queue with a bounded reason naming its cause, the
//! ordinary jobs complete exactly once, and the host:
//! - keeps the one broker connection it started with (no reconnect);
//! - is back near idle within [`SETTLE`] of the last settlement (below [`IDLE_CPU`]);
//! - stays under [`RSS_BOUND`] resident memory.

use std::path::Path;
use std::time::Duration;

use lapin::Channel;
use lapin::options::ConfirmSelectOptions;

use crate::support::faults::ledger::{self, Ledger};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::Row;
use crate::support::{publish_plainly, take_death_reasons};

/// How long after the last settlement the host must be idle again.
const SETTLE: Duration = Duration::from_secs(2);
/// Idle: less than this share of one core over the second after [`SETTLE`].
const IDLE_CPU: f64 = 0.10;
/// The host's resident memory bound for the whole scenario (a debug build).
const RSS_BOUND: u64 = 512 << 20;
/// The longest dead-letter reason the host may put on the wire.
const REASON_BOUND: usize = 4096;
/// The queue of `scripted.BareJob`, which defers as its payload says.
const DEFER_QUEUE: &str = "test.bare";
/// The flooding plugin's queue, and the floods it is sent (its payload picks one).
const FLOOD_QUEUE: &str = "test.hostcalls";
const FLOODS: [&str; 4] = ["job-type", "follow-ups", "log-message", "log-calls"];
const BIG: usize = 200_000;

pub(crate) fn envelope(job_type: &str, queue: &str, payload: &str) -> Vec<u8> {
    format!(
        r#"{{"job_id":"{}","job_type":"{job_type}","queue":"{queue}","attempt":1,"enqueued_at_ms":0,"payload":{payload}}}"#,
        uuid::Uuid::new_v4()
    )
    .into_bytes()
}

/// Wait for `count` dead letters on `queue`'s dead-letter queue and take them.
pub(crate) async fn dead_letters_of(channel: &Channel, queue: &str, count: usize) -> Vec<String> {
    let mut reasons = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while reasons.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} dead letters on `{queue}.dead` never came: {reasons:?}"
        );
        reasons.extend(take_death_reasons(channel, queue).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    reasons
}

/// CPU seconds (user + system) the process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("comm").1.split(' ').collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

/// Resident memory of the process, in bytes.
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

pub(crate) async fn run(host: &HostProcess, dir: &Path, ledger: &mut Ledger, jobs: usize) -> Row {
    let queues = ledger.queues().clone();
    let work_queue = queues.work;
    let channel = queues.raw_channel().await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms on the raw channel");
    let before = host.line_count();
    std::fs::copy(
        jobhost_fixtures::wasm("slow-manifest"),
        dir.join("slow_manifest.wasm"),
    )
    .expect("the blocking plugin copies in");
    for (fixture, file, queue) in [
        ("scripted", "scripted.wasm", DEFER_QUEUE),
        ("hostcalls", "hostcalls.wasm", FLOOD_QUEUE),
    ] {
        std::fs::copy(jobhost_fixtures::wasm(fixture), dir.join(file)).expect("copies in");
        let consuming = format!("queue={queue} ");
        host.wait_for_line(before, Duration::from_secs(120), |l| {
            l.contains("consuming") && l.contains(&consuming)
        })
        .await;
    }
    let refused = host
        .wait_for_line(before, Duration::from_secs(60), |l| {
            l.contains("plugin refused") && l.contains("slow_manifest.wasm")
        })
        .await;
    assert!(refused.contains("did not answer within"), "{refused}");

    let stray = ledger::fresh_ids(1)[0];
    let ordinary = ledger::fresh_ids(jobs);
    let big_type = "x".repeat(BIG);
    let big_string = "y".repeat(BIG);
    publish_plainly(
        &channel,
        work_queue,
        &envelope(&big_type, work_queue, r#"{"id":1}"#),
    )
    .await;
    let undecodable = format!(r#"{{"id":"{big_string}"}}"#);
    publish_plainly(
        &channel,
        work_queue,
        &envelope("ledger.Work", work_queue, &undecodable),
    )
    .await;
    let stray_payload = format!(r#"{{"id":{stray},"fail_times":1}}"#);
    publish_plainly(
        &channel,
        work_queue,
        &envelope("ledger.Work", "no.such.queue", &stray_payload),
    )
    .await;
    let forever = r#"{"key":"forever","defer_times":1,"defer_ms":3000000000}"#;
    publish_plainly(
        &channel,
        DEFER_QUEUE,
        &envelope("scripted.BareJob", DEFER_QUEUE, forever),
    )
    .await;
    for flood in FLOODS {
        let payload = format!("\"{flood}\"");
        publish_plainly(
            &channel,
            FLOOD_QUEUE,
            &envelope("hostcalls.Flood", FLOOD_QUEUE, &payload),
        )
        .await;
    }
    for &id in &ordinary {
        publish_plainly(&channel, work_queue, &queues.work(id, 0).encode()).await;
    }

    let mut completed = ordinary.clone();
    completed.push(stray);
    ledger
        .wait_for_all(
            &completed,
            Duration::from_secs(180),
            "the jobs behind the hostile ones",
        )
        .await;
    let dead = ledger.wait_for_dead(2, Duration::from_secs(60)).await;
    let deferral_dead = dead_letters_of(&channel, DEFER_QUEUE, 1).await;
    let flood_dead = dead_letters_of(&channel, FLOOD_QUEUE, FLOODS.len()).await;

    let pid = host.pid();
    tokio::time::sleep(SETTLE).await;
    let cpu_before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_share = cpu_seconds(pid) - cpu_before;
    let rss = rss_bytes(pid);

    let reasons: Vec<&str> = dead
        .iter()
        .map(|l| l.reason.as_str())
        .chain(deferral_dead.iter().chain(&flood_dead).map(String::as_str))
        .collect();
    for reason in &reasons {
        assert!(
            reason.len() < REASON_BOUND,
            "a bounded reason, not {} bytes",
            reason.len()
        );
        assert!(!reason.contains('\n'), "one line: {reason}");
    }
    let named = |prefix: &str| reasons.iter().any(|r| r.starts_with(prefix));
    assert!(named("no handler for job type `xxxx"), "{reasons:?}");
    assert!(
        named("decode error: invalid type: string \"yyyy"),
        "{reasons:?}"
    );
    assert!(
        deferral_dead.len() == 1 && deferral_dead[0].contains("3000000s"),
        "the impossible deferral is dead-lettered naming its delay: {deferral_dead:?}"
    );
    assert!(
        flood_dead
            .iter()
            .all(|r| r.contains("host-call budget exceeded")),
        "each flood costs its attempt, naming the budget: {flood_dead:?}"
    );
    let reconnects = host.lines_since(before, |l| l.contains("lost the broker connection"));
    assert_eq!(
        reconnects, 0,
        "one broker connection for the whole scenario"
    );
    assert!(
        idle_share < IDLE_CPU,
        "the host is back near idle {SETTLE:?} after the last message: {:.0}% of a core",
        idle_share * 100.0
    );
    assert!(
        rss < RSS_BOUND,
        "the host's RSS stays under {} MiB: {} MiB",
        RSS_BOUND >> 20,
        rss >> 20
    );
    println!(
        "hostile messages: host CPU {:.1}% of a core {SETTLE:?} after the last message, RSS {} MiB, reasons {:?} bytes",
        idle_share * 100.0,
        rss >> 20,
        reasons.iter().map(|r| r.len()).collect::<Vec<_>>()
    );

    let mut row = ledger.row(
        "h: hostile messages by a plain AMQP client, a flooding and a blocking plugin",
        &completed,
        &dead,
    );
    for reason in deferral_dead.iter().chain(&flood_dead) {
        row.sent += 1;
        *row.dead.entry(reason.clone()).or_default() += 1;
    }
    assert_eq!(row.duplicated, 0, "without a kill no job completes twice");
    row
}
