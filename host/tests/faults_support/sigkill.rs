//! A host SIGKILLed in the middle of a batch, some of whose jobs retry through hold
//! queues, and a new host process started on the same broker: every job completes, and
//! only jobs unacked at the kill complete twice: those running, and those done whose ack
//! was still on its way (acks are coalesced, see `broker/rabbitmq/acks.rs`), together
//! never more than the work queue's prefetch.

use std::path::Path;
use std::sync::Arc;

use jobhost::broker::RabbitMqBackend;

use super::ledger::{self, Ledger, patience};
use super::process::HostProcess;
use super::table::Row;

/// The ledger work queue's prefetch (the SDK's default): the most deliveries the broker
/// leaves unacked with one host, and so the most that can complete twice after a kill.
const WORK_PREFETCH: usize = 16;

/// Every tenth job fails once and every fiftieth twice, each retry waiting 1 s in a hold
/// queue, so the kill also hits jobs between attempts.
fn fail_times(index: usize) -> u32 {
    match index {
        i if i % 50 == 1 => 2,
        i if i % 10 == 0 => 1,
        _ => 0,
    }
}

pub(crate) async fn run(
    host: &mut HostProcess,
    dir: &Path,
    ledger: &mut Ledger,
    backend: &Arc<RabbitMqBackend>,
    jobs: usize,
) -> Row {
    let ids = ledger::fresh_ids(jobs);
    let envelopes = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| ledger::work(id, fail_times(i)))
        .collect();
    ledger::publish_all(backend, envelopes).await;

    let at_kill = ledger
        .wait_for(&ids, jobs / 4, patience(jobs), "a quarter before the kill")
        .await;
    host.kill();
    assert!(
        at_kill < jobs,
        "the kill lands mid-batch: {at_kill} of {jobs} jobs had completed"
    );

    *host = HostProcess::start(dir).await;
    ledger
        .wait_for_all(&ids, patience(jobs), "every job after the restart")
        .await;
    let dead = ledger.take_dead();
    let scenario = format!("a: SIGKILL after {at_kill}/{jobs} completed, new host");
    let row = ledger.row(&scenario, &ids, &dead);
    assert!(
        row.dead.is_empty(),
        "no ledger job is dead-lettered: {:?}",
        row.dead
    );
    assert!(
        row.duplicated <= WORK_PREFETCH,
        "only jobs unacked at the kill (at most the prefetch, {WORK_PREFETCH}) complete \
         twice, but {} did",
        row.duplicated
    );
    row
}
