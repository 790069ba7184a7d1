//! Floods of the host imports, `wasi:http` included, leave the host's memory bounded:
//! nothing a guest hands over is copied in bulk, and nothing of it stays.
//!
//! It holds [`MEASURING`](crate::MEASURING) throughout, so no other test's guests share the
//! process it measures.

use jobhost::job::Outcome;

use crate::support::plugin::floods::{FLOODS, HTTP_FLOODS, flood, http_flood};
use crate::support::plugin::{reset_peak, status_bytes};

const MIB: u64 = 1024 * 1024;

/// Rounds of every flood mode measured, after a warm-up round that fills the instance pool
/// and the allocator.
const ROUNDS: usize = 5;

/// How much the RSS may grow over [`ROUNDS`] rounds: 8 MiB. Measured: about 0.2 MiB.
const RSS_GROWTH_BOUND: u64 = 8 * MIB;

/// How far above the baseline the RSS may peak during the rounds: 28 MiB. The largest
/// string a flood hands over (16 MiB) lives once, in guest memory, which is part of the
/// host's RSS; measured peak about 12-20 MiB above the baseline. A host copy of it, as
/// lifting the argument into a `String` made, would add another 16 MiB; without the
/// `wasi:http` budget, the `method` flood alone would hold 1 GiB.
const PEAK_BOUND: u64 = 28 * MIB;

async fn every_flood() {
    for (mode, _) in FLOODS {
        let outcome = flood(mode).await;
        assert!(
            matches!(outcome, Outcome::Crashed(_)),
            "{mode}: {outcome:?}"
        );
    }
    for (mode, _) in HTTP_FLOODS {
        let outcome = http_flood(mode).await;
        assert!(
            matches!(outcome, Outcome::Crashed(_)),
            "wasi:http {mode}: {outcome:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn floods_leave_the_host_rss_within_a_stated_bound() {
    let _alone = crate::MEASURING.lock().await;
    every_flood().await;
    reset_peak();
    let before = status_bytes("VmRSS");
    for _ in 0..ROUNDS {
        every_flood().await;
    }
    let (after, peak) = (status_bytes("VmRSS"), status_bytes("VmHWM"));
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
