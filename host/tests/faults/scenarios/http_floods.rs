//! `wasi:http` floods against a running `jobhost run` process: the `httpflood` plugin,
//! written on raw `wasi:http` bindings, is dropped into its plugin directory and each of
//! its floods published [`ROUNDS`] times by a plain AMQP client, with ordinary jobs behind
//! them. Each flood ends in `test.httpflood.dead` with a reason naming the budget it
//! overran, the ordinary jobs complete, and the host's RSS, measured before the floods,
//! at its peak while they ran and after them, stays within [`PEAK_GROWTH`] of where it
//! started. Before the budget, one `method` flood alone (1,000 requests of a 1 MiB
//! method) held 1 GiB of host heap.

use std::path::Path;
use std::time::Duration;

use lapin::options::ConfirmSelectOptions;

use super::hostile_messages::{dead_letters_of, envelope, rss_bytes};

use crate::support::faults::ledger::{self, Ledger};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::Row;
use crate::support::plugin::floods::HTTP_FLOODS;
use crate::support::publish_plainly;

/// The flooding plugin's queue.
const QUEUE: &str = "test.httpflood";
/// How often each flood is published.
const ROUNDS: usize = 3;
/// How far above its RSS before the floods the host may peak: 256 MiB, eight jobs at once
/// (the host's concurrency) each holding what its budget lets it.
const PEAK_GROWTH: u64 = 256 << 20;

/// The peak RSS of process `pid` since the last [`reset_peak`], in bytes.
fn peak_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// Start measuring the peak RSS of process `pid` anew (Linux `clear_refs`, value 5).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("the peak RSS can be reset");
}

pub(crate) async fn run(host: &HostProcess, dir: &Path, ledger: &mut Ledger, jobs: usize) -> Row {
    let queues = ledger.queues().clone();
    let channel = queues.raw_channel().await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms on the raw channel");
    let seen = host.line_count();
    std::fs::copy(
        jobhost_fixtures::wasm("httpflood"),
        dir.join("httpflood.wasm"),
    )
    .expect("the flooding plugin copies in");
    let consuming = format!("queue={QUEUE} ");
    host.wait_for_line(seen, Duration::from_secs(120), |l| {
        l.contains("consuming") && l.contains(&consuming)
    })
    .await;

    let pid = host.pid();
    let before = rss_bytes(pid);
    reset_peak(pid);
    for _ in 0..ROUNDS {
        for (mode, _) in HTTP_FLOODS {
            let payload = format!(r#"{{"mode":"{mode}"}}"#);
            let message = envelope("httpflood.Flood", QUEUE, &payload);
            publish_plainly(&channel, QUEUE, &message).await;
        }
    }
    let ordinary = ledger::fresh_ids(jobs);
    for &id in &ordinary {
        publish_plainly(&channel, queues.work, &queues.work(id, 0).encode()).await;
    }
    ledger
        .wait_for_all(
            &ordinary,
            Duration::from_secs(180),
            "the jobs behind the wasi:http floods",
        )
        .await;
    let floods = HTTP_FLOODS.len() * ROUNDS;
    let reasons = dead_letters_of(&channel, QUEUE, floods).await;
    let (after, peak) = (rss_bytes(pid), peak_bytes(pid));

    for (mode, expected) in HTTP_FLOODS {
        let named = reasons.iter().filter(|r| r.contains(expected)).count();
        assert!(
            named >= ROUNDS,
            "each `{mode}` flood is dead-lettered naming its budget `{expected}`: {reasons:?}"
        );
    }
    let growth = peak.saturating_sub(before);
    assert!(
        growth < PEAK_GROWTH,
        "the host's RSS peaks less than {} MiB above its {} MiB before the floods: {} MiB",
        PEAK_GROWTH >> 20,
        before >> 20,
        peak >> 20
    );
    let mib = |bytes: u64| bytes >> 20;
    println!(
        "wasi:http floods: host RSS {} MiB before, {} MiB at the peak, {} MiB after",
        mib(before),
        mib(peak),
        mib(after)
    );

    let scenario = format!(
        "i: {floods} wasi:http floods by a raw-wasi plugin; host RSS {} MiB before, {} MiB peak, {} MiB after",
        mib(before),
        mib(peak),
        mib(after)
    );
    let mut row = ledger.row(&scenario, &ordinary, &[]);
    for reason in reasons {
        row.sent += 1;
        *row.dead.entry(reason).or_default() += 1;
    }
    assert_eq!(row.duplicated, 0, "without a kill no job completes twice");
    row
}
