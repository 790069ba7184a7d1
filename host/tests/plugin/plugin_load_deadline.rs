//! A plugin whose `manifest` never returns is refused within the load deadline, and
//! neither the directory load, the reload loop nor shutdown waits on it.

use std::path::Path;
use std::time::{Duration, Instant};

use jobhost::plugin::{EngineConfig, LoadError};
use jobhost::reload::{self, Loader};
use jobhost::testing::Harness;
use jobhost::worker::{Plugins, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::support::plugin::{PROMPTLY, engine_with, fixture, test_config, try_load};

/// The load deadline of these tests' engines.
const LOAD_TIMEOUT: Duration = Duration::from_secs(1);

/// The fixtures whose `manifest` spins, and sleeps, forever.
const SLOW: [&str; 2] = ["slow-manifest", "slow-manifest-sleep"];

fn config(load_timeout: Duration) -> EngineConfig {
    EngineConfig {
        load_timeout,
        cache_dir: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        ..test_config()
    }
}

#[tokio::test]
async fn a_manifest_that_spins_or_sleeps_forever_is_refused_within_the_load_deadline() {
    let engine = engine_with(config(LOAD_TIMEOUT));
    for name in SLOW {
        let started = Instant::now();
        let err = try_load(&engine, fixture(name))
            .await
            .expect_err("a plugin that never reports its manifest is refused");
        let elapsed = started.elapsed();
        let message = err.to_string();
        assert!(
            matches!(err, LoadError::ManifestTimeout { .. }),
            "{name}: {message}"
        );
        assert!(
            message.contains(&format!("{name}.wasm`"))
                && message.contains("did not answer within the deadline of 1s"),
            "{name}: the refusal names the file and the deadline: {message}"
        );
        // Compiling is not part of the deadline; PROMPTLY covers it on a debug build.
        assert!(
            elapsed < LOAD_TIMEOUT + PROMPTLY,
            "{name}: refused after {elapsed:?}"
        );
    }
}

#[tokio::test]
async fn a_good_plugin_beside_slow_manifests_loads_and_serves() {
    let dir = tempfile::tempdir().expect("a plugin directory");
    for name in SLOW.into_iter().chain(["noop"]) {
        std::fs::copy(fixture(name), dir.path().join(format!("{name}.wasm")))
            .expect("the fixture is copied");
    }
    let h = Harness::start([], WorkerConfig::default()).await;
    let loaded = h
        .loader(engine_with(config(LOAD_TIMEOUT)))
        .load_dir(dir.path())
        .await
        .expect("the directory is read");
    assert_eq!(loaded, 1, "only noop loads");

    h.enqueue("noop.Noop", serde_json::json!({})).await;
    tokio::time::timeout(PROMPTLY, h.run_until_idle())
        .await
        .expect("the job is served");
    let calls = h.log.calls();
    assert_eq!(calls.len(), 1, "noop ran once: {calls:?}");
    assert!(
        h.dead_letter_reasons("test.noop").is_empty(),
        "and succeeded"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn the_reload_loop_stops_at_shutdown_without_waiting_for_a_slow_manifest() {
    let dir = tempfile::tempdir().expect("a plugin directory");
    // No cache, so the load is seen to start; a deadline well above the wait for the watch.
    let load_timeout = Duration::from_secs(5);
    let engine = engine_with(EngineConfig {
        load_timeout,
        ..test_config()
    });
    let shutdown = CancellationToken::new();
    let watch = tokio::spawn({
        let loader = Loader::new(engine.clone(), Plugins::new());
        let (dir, shutdown) = (dir.path().to_owned(), shutdown.clone());
        async move { reload::watch(loader, &dir, shutdown).await }
    });
    // On this single-threaded runtime the task registers its watcher before it first waits.
    tokio::task::yield_now().await;
    let staged = tempfile::NamedTempFile::new_in(dir.path()).expect("a staging file");
    std::fs::copy(fixture("slow-manifest-sleep"), staged.path()).expect("the fixture is copied");
    staged
        .persist(dir.path().join("slow.wasm"))
        .expect("renamed into place");
    let deadline = Instant::now() + PROMPTLY;
    while engine.compilations() == 0 {
        assert!(
            Instant::now() < deadline,
            "the watch starts loading the file"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let stopping = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(load_timeout / 2, watch)
        .await
        .expect("the watch returns at shutdown, not at the load deadline")
        .expect("the watch task does not panic")
        .expect("the watch ends cleanly");
    assert!(stopping.elapsed() < load_timeout / 2);
}
