//! The broker failing under a running host process: every connection closed by the broker,
//! then the broker application stopped and started while jobs are still being published.
//! The host recovers by itself (it is never restarted) and no job is lost.

use std::sync::Arc;

use jobhost::broker::RabbitMqBackend;

use crate::support::faults::ledger::{self, Ledger, patience};
use crate::support::faults::table::Row;
use crate::support::rabbitmqctl;

/// Starts the broker application again if the suite fails while it is stopped, because
/// the broker is shared with every later test.
struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .arg("start_app")
            .output();
    }
}

pub(crate) async fn run(ledger: &mut Ledger, backend: &Arc<RabbitMqBackend>, jobs: usize) -> Row {
    let queues = ledger.queues().clone();
    let ids = ledger::fresh_ids(jobs);
    let mut envelopes: Vec<_> = ids.iter().map(|&id| queues.work(id, 0)).collect();
    let second_half = envelopes.split_off(jobs / 2);
    ledger::publish_all(backend, envelopes).await;

    ledger
        .wait_for(
            &ids,
            jobs / 10,
            patience(jobs),
            "a tenth before the connections close",
        )
        .await;
    // Every connection of the ledger's virtual host: the host's, the publisher's and the
    // ledger's, and no other test's.
    rabbitmqctl(&[
        "close_all_connections",
        "--vhost",
        queues.vhost_name(),
        "jobhost fault suite",
    ]);
    ledger.reconnect().await;

    ledger
        .wait_for(
            &ids,
            jobs / 3,
            patience(jobs),
            "a third before the broker stops",
        )
        .await;
    let _restart = StartAppOnDrop;
    rabbitmqctl(&["stop_app"]);
    let publisher = {
        let backend = Arc::clone(backend);
        tokio::spawn(async move { ledger::publish_all(&backend, second_half).await })
    };
    rabbitmqctl(&["start_app"]);
    rabbitmqctl(&["await_startup"]);
    publisher
        .await
        .expect("publishes wait out the outage instead of failing");
    ledger.reconnect().await;

    ledger
        .wait_for_all(&ids, patience(jobs), "every job after the broker restart")
        .await;
    let dead = ledger.take_dead();
    let row = ledger.row(
        "e: connections closed, broker stopped and started",
        &ids,
        &dead,
    );
    assert!(
        row.dead.is_empty(),
        "no ledger job is dead-lettered: {:?}",
        row.dead
    );
    row
}
