//! Test plugin: one job, `noop.Noop` on queue `test.noop`, that succeeds without doing
//! anything. The cheapest possible delivery, for measuring the host's own overhead.
//!
//! With feature `wide` (fixture `noop-wide`) the queue is `bench.wide.noop` with prefetch
//! 200: the black-box benchmark runs the `jobhost` binary on it, and a queue's prefetch is
//! set by its plugin, not by the host's command line.
//!
//! With feature `busy` (fixture `noop-busy`, on the same queue) each job first spends a
//! fixed amount of CPU, about 0.6 ms: a CPU-bound plugin for the black-box benchmark, to
//! show what the host's thread count does to work that is not the host's own.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[cfg_attr(not(feature = "wide"), queues(prefix = "test"))]
#[cfg_attr(feature = "wide", queues(prefix = "bench.wide"))]
enum NoopQueues {
    #[cfg_attr(feature = "wide", queue(prefetch = 200))]
    Noop,
}

/// Does nothing.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "noop.Noop", queue = NoopQueues::Noop)]
struct Noop {}

fn noop(_job: Noop, _ctx: &JobContext) -> Result<(), JobError> {
    #[cfg(feature = "busy")]
    busy();
    Ok(())
}

/// Rounds of [`busy`]'s arithmetic per job.
#[cfg(feature = "busy")]
const BUSY_ROUNDS: u64 = 400_000;

/// A fixed amount of CPU: rounds of a multiply-rotate mix, each depending on the last,
/// behind `black_box` so the compiler can neither drop nor fold them.
#[cfg(feature = "busy")]
fn busy() {
    let mut mix: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..BUSY_ROUNDS {
        mix = std::hint::black_box(mix.rotate_left(7) ^ round).wrapping_mul(0x2545_F491_4F6C_DD1D);
    }
    std::hint::black_box(mix);
}

jobhost_sdk::plugin!(queues = NoopQueues, jobs = { Noop => noop });
