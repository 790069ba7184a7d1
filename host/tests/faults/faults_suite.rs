//! The fault suite: a host process SIGKILLed mid-batch, one stopped by SIGTERM mid-batch,
//! bad input on a work queue, broken plugin files, the broker closing every connection and
//! restarting, hostile plugins under load and a plugin flooding `wasi:http`, each counted in a ledger kept apart from
//! the host (see `support::faults::ledger`), ending in a summary table:
//! scenario | sent | completed | lost | duplicated | dead-lettered (by reason).
//! No job is ever lost.
//!
//! Needs the RabbitMQ broker at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! without one it fails, unless `JOBHOST_SKIP_BROKER_TESTS=1` asks to skip it.
//!
//! Each scenario sends a few thousand jobs by default; for a larger run:
//!
//! ```text
//! JOBHOST_FAULT_JOBS=20000 cargo test -p jobhost --test faults faults_suite:: -- --nocapture
//! ```
//!
//! whose last output is the table. One test, because the scenarios share the `ledger`
//! fixture's queues and one host process, and the table sums them up.

use std::sync::Arc;

use crate::scenarios::{
    bad_input, broken_plugins, broker_faults, hostile, hostile_messages, http_floods, job_count,
    stops,
};
use crate::support::faults::ledger::{Ledger, LedgerQueues};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::Table;
use crate::support::{backend, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fault_loses_a_job_and_the_ledger_accounts_for_every_one() {
    if backend(&unique("faults-probe")).await.is_none() {
        return;
    }
    // The fixture's queues, and those of the plugins the scenarios add, in a virtual host
    // of their own, deleted with them after the hosts are gone.
    let queues = LedgerQueues::classic();
    let publisher = Arc::new(queues.backend(&unique("faults")).await);
    let jobs = job_count();
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("ledger"),
        dir.path().join("ledger.wasm"),
    )
    .expect("the ledger plugin copies in");
    let mut host = HostProcess::start(dir.path(), &queues).await;
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let mut table = Table::default();

    table
        .0
        .push(stops::killed(&mut host, dir.path(), &mut ledger, &publisher, jobs).await);
    table
        .0
        .push(stops::terminated(&mut host, dir.path(), &mut ledger, &publisher, jobs).await);
    table.0.push(bad_input::run(&mut ledger, jobs / 10).await);
    table
        .0
        .push(broken_plugins::run(&host, dir.path(), &mut ledger, &publisher, jobs / 10).await);
    table
        .0
        .push(broker_faults::run(&mut ledger, &publisher, jobs).await);
    table
        .0
        .push(hostile_messages::run(&host, dir.path(), &mut ledger, 1000).await);
    table
        .0
        .push(http_floods::run(&host, dir.path(), &mut ledger, 1000).await);
    drop(host);
    table.0.push(hostile::run(jobs / 2).await);

    println!("\n{table}");
    for row in &table.0 {
        assert_eq!(row.lost(), 0, "`{}` loses no job", row.scenario);
    }
}
