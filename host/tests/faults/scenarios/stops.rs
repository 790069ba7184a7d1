//! A host stopped in the middle of a batch, and a new host process started on the same
//! broker: every job completes.
//! - [`killed`]: SIGKILL. Some of the jobs retry through hold queues, so the kill also
//!   hits jobs between attempts. Only jobs unacked at the kill complete twice: those
//!   running, and those done whose ack was still on its way (acks go out in batches, see
//!   `broker/rabbitmq/acks.rs`), together never more than the work queue's prefetch.
//! - [`terminated`]: SIGTERM. A graceful stop lets the running jobs finish, hands back
//!   what was prefetched and never started, and sends every ack, batched or not, before it
//!   closes the connection, so no job completes twice.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::RabbitMqBackend;

use crate::support::faults::ledger::{self, Ledger, patience};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::Row;

/// The ledger work queue's prefetch (the SDK's default): the most deliveries the broker
/// leaves unacked with one host, and so the most that can complete twice after a kill.
const WORK_PREFETCH: usize = 16;

/// How long a host stopped by SIGTERM may take to exit: its jobs are quick, so this is
/// the time to finish the few running, hand back the prefetched and close, with room for
/// a loaded machine; far inside the worker's 30 s grace period.
const EXIT: Duration = Duration::from_secs(20);

/// Every tenth job fails once and every fiftieth twice, each retry waiting 1 s in a hold
/// queue.
fn fail_times(index: usize) -> u32 {
    match index {
        i if i % 50 == 1 => 2,
        i if i % 10 == 0 => 1,
        _ => 0,
    }
}

pub(crate) async fn killed(
    host: &mut HostProcess,
    dir: &Path,
    ledger: &mut Ledger,
    backend: &Arc<RabbitMqBackend>,
    jobs: usize,
) -> Row {
    let ids = ledger::fresh_ids(jobs);
    let at_kill = under_way(ledger, backend, &ids, fail_times).await;
    host.kill();
    let scenario = format!("a: SIGKILL after {at_kill}/{jobs} completed, new host");
    let row = finish_on_a_new_host(host, dir, ledger, &ids, &scenario).await;
    assert!(
        row.duplicated <= WORK_PREFETCH,
        "only jobs unacked at the kill (at most the prefetch, {WORK_PREFETCH}) complete \
         twice, but {} did",
        row.duplicated
    );
    row
}

pub(crate) async fn terminated(
    host: &mut HostProcess,
    dir: &Path,
    ledger: &mut Ledger,
    backend: &Arc<RabbitMqBackend>,
    jobs: usize,
) -> Row {
    let ids = ledger::fresh_ids(jobs);
    let at_stop = under_way(ledger, backend, &ids, |_| 0).await;
    let status = host.terminate(EXIT).await;
    assert!(
        status.success(),
        "a host stopped by SIGTERM exits 0, not {status}; the log's tail:\n{}",
        host.tail()
    );
    let scenario = format!("f: SIGTERM after {at_stop}/{jobs} completed, new host");
    let row = finish_on_a_new_host(host, dir, ledger, &ids, &scenario).await;
    assert_eq!(
        row.duplicated, 0,
        "a graceful stop acks every job it completed, so none completes twice"
    );
    row
}

/// Publish a `ledger.Work` per id, the job at index `i` failing `fail_times(i)` times, and
/// wait until a quarter of them completed; how many had, which is fewer than all.
async fn under_way(
    ledger: &mut Ledger,
    backend: &Arc<RabbitMqBackend>,
    ids: &[u64],
    fail_times: impl Fn(usize) -> u32,
) -> usize {
    let queues = ledger.queues().clone();
    let envelopes = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| queues.work(id, fail_times(i)))
        .collect();
    ledger::publish_all(backend, envelopes).await;
    let jobs = ids.len();
    let completed = ledger
        .wait_for(ids, jobs / 4, patience(jobs), "a quarter before the stop")
        .await;
    assert!(
        completed < jobs,
        "the stop lands mid-batch: {completed} of {jobs} jobs had completed"
    );
    completed
}

/// Start a new host on `dir` in place of the stopped one, wait for every one of `ids` to
/// complete, and the scenario's row, in which no ledger job is dead-lettered.
async fn finish_on_a_new_host(
    host: &mut HostProcess,
    dir: &Path,
    ledger: &mut Ledger,
    ids: &[u64],
    scenario: &str,
) -> Row {
    *host = HostProcess::start(dir, ledger.queues()).await;
    ledger
        .wait_for_all(ids, patience(ids.len()), "every job after the restart")
        .await;
    let dead = ledger.take_dead();
    let row = ledger.row(scenario, ids, &dead);
    assert!(
        row.dead.is_empty(),
        "no ledger job is dead-lettered: {:?}",
        row.dead
    );
    row
}
