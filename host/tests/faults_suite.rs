//! The fault suite: a host process SIGKILLed mid-batch, one stopped by SIGTERM mid-batch,
//! bad input on a work queue, broken plugin files, the broker closing every connection and
//! restarting, hostile plugins under load and a plugin flooding `wasi:http`, each counted in a ledger kept apart from
//! the host (see `faults_support::ledger`), ending in a summary table:
//! scenario | sent | completed | lost | duplicated | dead-lettered (by reason).
//! No job is ever lost.
//!
//! Needs the RabbitMQ broker at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! without one it fails, unless `JOBHOST_SKIP_BROKER_TESTS=1` asks to skip it.
//!
//! Each scenario sends a few thousand jobs by default; for a larger run:
//!
//! ```text
//! JOBHOST_FAULT_JOBS=20000 cargo test -p jobhost --test faults_suite -- --nocapture
//! ```
//!
//! whose last output is the table. One test, because the scenarios share the `ledger`
//! fixture's queues and one host process, and the table sums them up.

mod faults_support;
mod plugin_support;
mod support;

use std::sync::Arc;

use faults_support::ledger::{DONE_QUEUE, Ledger, WORK_QUEUE};
use faults_support::process::HostProcess;
use faults_support::table::Table;
use faults_support::{
    bad_input, broken_plugins, broker_faults, hostile, hostile_messages, http_floods, job_count,
    stops,
};
use support::worker::fixture_queues;
use support::{backend, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fault_loses_a_job_and_the_ledger_accounts_for_every_one() {
    let _cleanup = fixture_queues(&[WORK_QUEUE, DONE_QUEUE]);
    let _hostile_cleanup = fixture_queues(&hostile_messages::QUEUES);
    let _flood_cleanup = fixture_queues(&[http_floods::QUEUE]);
    let Some(publisher) = backend(&unique("faults")).await.map(Arc::new) else {
        return;
    };
    let jobs = job_count();
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("ledger"),
        dir.path().join("ledger.wasm"),
    )
    .expect("the ledger plugin copies in");
    let mut host = HostProcess::start(dir.path()).await;
    let mut ledger = Ledger::open().await;
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
