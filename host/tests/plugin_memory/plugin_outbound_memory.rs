//! A 1 GiB response is cut at the plugin's `max_response_bytes`, and neither the guest nor
//! the host holds it: the body streams through both, pulled as the guest reads.
//!
//! It holds [`MEASURING`](crate::MEASURING) throughout, so no other test's guests share the
//! process it measures.

use crate::support::outbound::{GIB, Server, bytes_read, failure, fetch, probe_granted};
use crate::support::plugin::{MEMORY_LIMIT, reset_peak, status_bytes};

const MIB: u64 = 1024 * 1024;

/// The cap of the test: far more than the guest's memory cap ([`MEMORY_LIMIT`], 32 MiB),
/// so a guest or a host that kept the body would be caught.
const CAP: u64 = 256 * MIB;

// A guest that reads more than its memory holds and still completes did not keep the body.
const _: () = assert!((MEMORY_LIMIT as u64) < CAP);

/// How far above the baseline the host's RSS may peak while the body streams: 16 MiB.
/// Measured: about 2 MiB.
const PEAK_BOUND: u64 = 16 * MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gib_response_is_cut_at_the_cap_with_guest_and_host_memory_bounded() {
    let _alone = crate::MEASURING.lock().await;
    let server = Server::start().await;
    let toml = format!(
        "[plugins.http-probe]\nallowed_outbound_hosts = [\"{}\"]\nmax_response_bytes = {CAP}\n",
        server.origin()
    );
    let (_engine, probe) = probe_granted(&toml).await;
    // Warm up: the instance pool, the allocator and the server's first connection.
    let _ = fetch(&probe, &server.url("/ok"), false).await;
    reset_peak();
    let before = status_bytes("VmRSS");
    let message = failure(fetch(&probe, &server.url("/gib"), false).await);
    let peak = status_bytes("VmHWM");
    let above = peak.saturating_sub(before);
    println!("{message}; rss {before} bytes, peak {peak} (+{above})");
    let read = bytes_read(&message);
    assert!(
        read > CAP - MIB && read <= CAP,
        "the guest read up to the cap of {CAP} bytes of the {GIB}, and no more: {message}"
    );
    assert!(
        above <= PEAK_BOUND,
        "streaming {read} bytes raised the host's RSS {above} bytes above the baseline, \
         more than {PEAK_BOUND}"
    );
}
