//! Floods of the host imports leave the host's memory bounded: nothing a guest hands over
//! is copied in bulk, and nothing of it stays.
//!
//! The only test of its binary, so no other test's guests share the process it measures.

mod plugin_support;

use jobhost::job::Outcome;
use plugin_support::floods::{FLOODS, flood};

const MIB: u64 = 1024 * 1024;

/// Rounds of every flood mode measured, after a warm-up round that fills the instance pool
/// and the allocator.
const ROUNDS: usize = 5;

/// How much the RSS may grow over [`ROUNDS`] rounds: 8 MiB. Measured: about 0.2 MiB.
const RSS_GROWTH_BOUND: u64 = 8 * MIB;

/// How far above the baseline the RSS may peak during the rounds: 28 MiB. The largest
/// string a flood hands over (16 MiB) lives once, in guest memory, which is part of the
/// host's RSS; measured peak about 20 MiB above the baseline. Lifting that string into a
/// host `String`, as bindgen's generated imports did, adds another 16 MiB.
const PEAK_BOUND: u64 = 28 * MIB;

/// Resident set size of this process, from `/proc/self/statm` (pages of 4 KiB).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm's second field is the resident page count");
    pages * 4096
}

/// The peak RSS since the last [`reset_peak`], from `/proc/self/status`.
fn peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

/// Start measuring the peak RSS anew (Linux `clear_refs`, value 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak RSS can be reset");
}

async fn every_flood() {
    for (mode, _) in FLOODS {
        let outcome = flood(mode).await;
        assert!(
            matches!(outcome, Outcome::Crashed(_)),
            "{mode}: {outcome:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn floods_leave_the_host_rss_within_a_stated_bound() {
    every_flood().await;
    reset_peak();
    let before = rss();
    for _ in 0..ROUNDS {
        every_flood().await;
    }
    let (after, peak) = (rss(), peak());
    let (growth, above) = (after.saturating_sub(before), peak.saturating_sub(before));
    println!("rss {before} -> {after} bytes (growth {growth}), peak {peak} (+{above})");
    assert!(
        growth <= RSS_GROWTH_BOUND,
        "{ROUNDS} rounds of floods grew the RSS by {growth} bytes, more than {RSS_GROWTH_BOUND}"
    );
    assert!(
        above <= PEAK_BOUND,
        "floods raised the RSS {above} bytes above the baseline, more than {PEAK_BOUND}"
    );
}
