//! Hot reload under load on RabbitMQ: a few thousand jobs while the plugin file is
//! replaced (by atomic rename, as deployments should) ten times. Every job completes once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::Backend;
use jobhost::plugin::{Engine, EngineConfig};
use jobhost::reload::{Loader, watch};
use jobhost::testing::InvocationLog;
use jobhost::worker::{Plugins, Worker, WorkerConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::worker::{eventually, fixture_queues, publish};
use crate::support::{backend, raw_channel, ready, unique, within};

const JOBS: usize = 3000;
const SWAPS: usize = 10;

/// Deploy `fixture` as `dir/versioned.wasm` the way docs/cli.md says ("Deploying a
/// plugin"): write a temporary file beside it, then rename it into place.
fn deploy(dir: &Path, fixture: &str) {
    let staged = dir.join(".versioned.wasm.tmp");
    std::fs::copy(jobhost_fixtures::wasm(fixture), &staged).expect("stage");
    std::fs::rename(&staged, dir.join("versioned.wasm")).expect("rename into place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_swaps_under_load_lose_and_duplicate_no_job() {
    let _cleanup = fixture_queues(&["test.versioned"]).await;
    let Some(backend) = backend(&unique("reload")).await.map(Arc::new) else {
        return;
    };
    let dir = tempfile::tempdir().expect("plugin dir");
    deploy(dir.path(), "versioned");

    let log = InvocationLog::default();
    let plugins = Plugins::new();
    let recorder = log.clone();
    let cache = tempfile::tempdir().expect("cache dir");
    let config = EngineConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..EngineConfig::default()
    };
    let loader = Loader::new(Engine::new(config).expect("engine"), plugins.clone())
        .wrapping(Arc::new(move |handler| recorder.recording(handler)));
    assert_eq!(loader.load_dir(dir.path()).await.expect("read dir"), 1);
    for queue in plugins.current().queues() {
        backend.declare(queue).await.expect("declare");
    }
    let shutdown = CancellationToken::new();
    let watcher = tokio::spawn({
        let (loader, dir, shutdown) = (loader.clone(), dir.path().to_owned(), shutdown.clone());
        async move { watch(loader, &dir, shutdown).await }
    });
    let worker = tokio::spawn(
        Worker::new(backend.clone(), plugins.clone(), WorkerConfig::default())
            .run(shutdown.clone()),
    );

    let mut sent = Vec::with_capacity(JOBS);
    let per_swap = JOBS / SWAPS;
    for swap in 0..SWAPS {
        for i in 0..per_swap {
            let n = swap * per_swap + i;
            sent.push(
                publish(
                    &backend,
                    "versioned.Echo",
                    "test.versioned",
                    json!({ "message": n.to_string() }),
                )
                .await
                .job_id,
            );
        }
        let before = plugins
            .current()
            .route("versioned.Echo")
            .expect("always served")
            .plugin
            .clone();
        deploy(
            dir.path(),
            if swap % 2 == 0 {
                "versioned-v2"
            } else {
                "versioned"
            },
        );
        eventually(Duration::from_secs(30), "the swap to take effect", || {
            let current = plugins
                .current()
                .route("versioned.Echo")
                .map(|route| route.plugin.clone());
            let swapped = current.is_some_and(|plugin| plugin != before);
            async move { swapped }
        })
        .await;
    }

    let channel = raw_channel().await;
    eventually(Duration::from_secs(120), "every job to complete", || {
        let done: std::collections::HashSet<uuid::Uuid> = log
            .calls()
            .iter()
            .filter(|c| c.outcome == "ok")
            .map(|c| c.job_id)
            .collect();
        async move { done.len() == JOBS }
    })
    .await;
    eventually(Duration::from_secs(30), "the queue to drain", || async {
        ready(&channel, "test.versioned").await == 0
    })
    .await;

    let mut completions: HashMap<uuid::Uuid, usize> = HashMap::new();
    for call in log.calls().iter().filter(|c| c.outcome == "ok") {
        *completions.entry(call.job_id).or_default() += 1;
    }
    let lost = sent
        .iter()
        .filter(|id| !completions.contains_key(id))
        .count();
    let duplicated = completions.values().filter(|n| **n > 1).count();
    println!("scenario | sent | swaps | completed | lost | duplicated");
    println!(
        "hot reload under load | {JOBS} | {SWAPS} | {} | {lost} | {duplicated}",
        completions.len()
    );
    assert_eq!(
        (lost, duplicated),
        (0, 0),
        "every job completes exactly once across the swaps"
    );

    shutdown.cancel();
    within(Duration::from_secs(30), "the worker to stop", worker)
        .await
        .expect("worker");
    within(Duration::from_secs(5), "the watcher to stop", watcher)
        .await
        .expect("watcher")
        .expect("watch");
    backend.close().await;
}
