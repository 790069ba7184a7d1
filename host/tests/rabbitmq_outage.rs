//! Broker faults in the middle of a run of a few thousand jobs: every connection closed by
//! the broker, then the broker application stopped and started. The worker is never
//! restarted and no job is lost. Its own test binary, because the faults hit every
//! connection to the broker.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::worker::{Running, eventually, fixture_queues, publish};
use support::{backend, rabbitmqctl, raw_channel, ready, unique};

const JOBS: usize = 3000;

/// Starts the broker application again if the test fails while it is stopped.
struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .arg("start_app")
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_connections_and_a_broker_restart_lose_no_job() {
    let _cleanup = fixture_queues(&["test.noop"]);
    let Some(backend) = backend(&unique("outage")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "noop").await;
    let log = running.log.clone();

    let first_half = JOBS / 2;
    let mut sent = Vec::with_capacity(JOBS);
    for i in 0..first_half {
        sent.push(
            publish(
                &backend,
                "noop.Noop",
                "test.noop",
                json!({"key": format!("job-{i}")}),
            )
            .await
            .job_id,
        );
    }
    eventually(
        Duration::from_secs(60),
        "a tenth of the jobs to run",
        || async { log.calls().len() >= JOBS / 10 },
    )
    .await;
    rabbitmqctl(&["close_all_connections", "jobhost fault test"]);

    eventually(
        Duration::from_secs(60),
        "a third of the jobs to run",
        || async { log.calls().len() >= JOBS / 3 },
    )
    .await;
    let _restart_guard = StartAppOnDrop;
    rabbitmqctl(&["stop_app"]);
    let publisher = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let mut ids = Vec::with_capacity(JOBS - first_half);
            for i in first_half..JOBS {
                let key = format!("job-{i}");
                ids.push(
                    publish(&backend, "noop.Noop", "test.noop", json!({ "key": key }))
                        .await
                        .job_id,
                );
            }
            ids
        })
    };
    rabbitmqctl(&["start_app"]);
    rabbitmqctl(&["await_startup"]);
    sent.extend(
        publisher
            .await
            .expect("publishes wait out the outage instead of failing"),
    );

    let channel = raw_channel().await;
    eventually(
        Duration::from_secs(120),
        "every job to complete",
        || async {
            let mut done: Vec<uuid::Uuid> = log
                .calls()
                .iter()
                .filter(|c| c.outcome == "ok")
                .map(|c| c.job_id)
                .collect();
            done.sort();
            done.dedup();
            done.len() == JOBS
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the work queue to drain",
        || async { ready(&channel, "test.noop").await == 0 },
    )
    .await;

    let mut runs: HashMap<uuid::Uuid, usize> = HashMap::new();
    for call in log.calls().iter().filter(|c| c.outcome == "ok") {
        *runs.entry(call.job_id).or_default() += 1;
    }
    let lost = sent.iter().filter(|id| !runs.contains_key(id)).count();
    let duplicated = runs.values().filter(|n| **n > 1).count();
    println!("scenario | sent | completed | lost | duplicated");
    println!(
        "broker faults | {JOBS} | {} | {lost} | {duplicated}",
        runs.len()
    );
    assert_eq!(lost, 0, "no job is lost");
    assert_eq!(runs.len(), JOBS, "only the jobs sent ran");
    running.stop().await;
    backend.close().await;
}
