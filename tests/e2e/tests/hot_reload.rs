//! Hot reload on the memory backend: swaps, refusals, removal and the warm cache, with the
//! `versioned` plugin in its two builds (v1: 2 attempts, fixed 1s; v2: 4 attempts, fixed 2s).

use std::path::{Path, PathBuf};
use std::time::Duration;

use jobhost::plugin::{Engine, EngineConfig};
use jobhost::reload::{Change, Loader, ReloadError};
use jobhost::testing::Harness;
use jobhost::worker::{Unit, WorkerConfig};
use serde_json::json;

const QUEUE: &str = "test.versioned";
const ECHO: &str = "versioned.Echo";

fn engine() -> Engine {
    jobhost_e2e::engine(env!("CARGO_TARGET_TMPDIR"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(jobhost_fixtures::wasm(name)).expect("fixture")
}

/// A plugin directory holding `versioned.wasm` as v1.
fn plugin_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("versioned.wasm");
    std::fs::write(&path, fixture("versioned")).expect("write v1");
    (dir, path)
}

async fn started(path: &Path) -> (Harness, Loader) {
    let h = Harness::start([], WorkerConfig::default()).await;
    let loader = h.loader(engine());
    assert!(
        matches!(loader.sync(path).await, Ok(Change::Loaded { .. })),
        "v1 loads"
    );
    (h, loader)
}

fn serving_version(h: &Harness) -> Option<String> {
    h.plugins
        .current()
        .route(ECHO)
        .map(|route| route.plugin.to_string())
}

fn reasons(h: &Harness) -> Vec<String> {
    h.backend
        .take_dead_letters(QUEUE)
        .into_iter()
        .map(|d| d.reason)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_swap_changes_behaviour_and_policy_for_the_next_delivery() {
    let (_dir, path) = plugin_dir();
    let (h, loader) = started(&path).await;
    h.enqueue(ECHO, json!({"message": "before", "fail_times": 9}))
        .await;
    h.run_until_idle().await;
    assert_eq!(
        reasons(&h),
        ["max attempts (2) exhausted after attempt 2: job failed (retryable): v1 says no"]
    );

    std::fs::write(&path, fixture("versioned-v2")).expect("write v2");
    let change = loader.sync(&path).await.expect("v2 loads");
    assert!(
        matches!(change, Change::Replaced { ref old, ref new, .. } if old != new),
        "{change:?}"
    );
    h.enqueue(ECHO, json!({"message": "after", "fail_times": 9}))
        .await;
    h.run_until_idle().await;
    assert_eq!(
        reasons(&h),
        ["max attempts (4) exhausted after attempt 4: job failed (retryable): v2 says no"]
    );
    assert_eq!(
        h.log.waits_of("after"),
        vec![Duration::from_secs(2); 3],
        "v2's fixed 2s"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_mid_retries_is_decided_by_the_new_versions_policy() {
    let (_dir, path) = plugin_dir();
    let (h, _loader) = started(&path).await;
    let v2_path = jobhost_fixtures::wasm("versioned-v2");
    let engine = engine();
    // Compiled before the job starts, because a compile under the paused clock would let
    // tokio jump to the retry's timer while it waits for the blocking task.
    let v2 = tokio::task::spawn_blocking(move || engine.load(&v2_path))
        .await
        .expect("task")
        .expect("v2 loads");

    h.enqueue(ECHO, json!({"message": "mid", "fail_times": 1}))
        .await;
    while h.backend.acked(QUEUE).is_empty() {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        h.backend.deferred(QUEUE).len(),
        1,
        "attempt 1 failed on v1 and waits for its retry"
    );
    h.install(Unit::from_plugin(path.display().to_string(), v2))
        .expect("swap to v2");
    h.run_until_idle().await;

    assert_eq!(
        h.log.attempts_of("mid"),
        vec![1, 2, 3],
        "v1 would have given up after attempt 2"
    );
    assert_eq!(
        h.log.waits_of("mid"),
        vec![Duration::from_secs(1), Duration::from_secs(2)],
        "v1's wait, then v2's"
    );
    assert!(h.backend.dead_letters(QUEUE).is_empty());
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn broken_files_are_refused_with_the_file_and_cause_while_the_old_version_keeps_serving() {
    let (dir, path) = plugin_dir();
    let (h, loader) = started(&path).await;
    let v1 = serving_version(&h).expect("v1 serves");
    let v2 = fixture("versioned-v2");
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "random bytes",
            b"\x13\x37 definitely not wasm".to_vec(),
            "is not a WebAssembly file",
        ),
        (
            "truncated copy",
            v2[..v2.len() / 2].to_vec(),
            "cannot compile",
        ),
        (
            "core module",
            b"\0asm\x01\0\0\0".to_vec(),
            "is a core WebAssembly module",
        ),
        (
            "another version",
            fixture("old-version"),
            "jobhost:plugin@0.0.1",
        ),
    ];
    for (what, bytes, cause) in cases {
        std::fs::write(&path, bytes).expect("write");
        let err = loader.sync(&path).await.expect_err(what).to_string();
        assert!(
            err.contains(&path.display().to_string()),
            "{what}: names the file: {err}"
        );
        assert!(err.contains(cause), "{what}: says why ({cause}): {err}");
        assert_eq!(
            serving_version(&h).as_deref(),
            Some(v1.as_str()),
            "{what}: v1 keeps serving"
        );
    }
    h.enqueue(ECHO, json!({"message": "still v1"})).await;
    h.run_until_idle().await;
    assert_eq!(
        h.log.attempts_of("still v1"),
        vec![1],
        "v1 succeeds on the first attempt"
    );

    let rival = dir.path().join("rival.wasm");
    std::fs::write(&rival, &v2).expect("write rival");
    let err = loader
        .sync(&rival)
        .await
        .expect_err("a second claim on the job type");
    assert!(matches!(err, ReloadError::Conflict { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("rival.wasm") && message.contains("versioned.wasm"),
        "names both: {message}"
    );

    std::fs::write(&path, &v2).expect("fix the file");
    assert!(
        matches!(loader.sync(&path).await, Ok(Change::Replaced { .. })),
        "the fixed file loads"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_removed_plugin_stops_consuming_and_its_messages_wait_for_the_next_one() {
    let (_dir, path) = plugin_dir();
    let (h, loader) = started(&path).await;
    h.enqueue(ECHO, json!({"message": "served"})).await;
    h.run_until_idle().await;

    std::fs::remove_file(&path).expect("remove");
    assert_eq!(loader.sync(&path).await.expect("unload"), Change::Removed);
    assert!(h.plugins.current().route(ECHO).is_none());
    let waiting = h.backend.acked(QUEUE)[0].clone();
    let mut orphan = waiting.next_attempt();
    orphan.attempt = 1;
    orphan.job_id = uuid::Uuid::new_v4();
    jobhost::broker::Backend::publish(&h.backend, &orphan, None)
        .await
        .expect("publish");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        h.backend.ready(QUEUE),
        1,
        "the message stays in the broker, unconsumed"
    );

    std::fs::write(&path, fixture("versioned")).expect("restore");
    loader.sync(&path).await.expect("reload");
    h.run_until_idle().await;
    assert_eq!(
        h.backend.acked(QUEUE).len(),
        2,
        "the plugin that claims it again serves it"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn a_restart_with_a_warm_cache_loads_without_compiling() {
    let (dir, _path) = plugin_dir();
    let cache = tempfile::tempdir().expect("cache dir");
    let config = EngineConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..EngineConfig::default()
    };
    for (run, compiled) in [("cold", 1), ("warm", 0)] {
        let engine = Engine::new(config.clone()).expect("engine");
        let loader = Loader::new(engine.clone(), jobhost::worker::Plugins::new());
        assert_eq!(
            loader.load_dir(dir.path()).await.expect("read dir"),
            1,
            "{run}: loaded"
        );
        assert_eq!(
            engine.compilations(),
            compiled,
            "{run} start compiles {compiled} plugin(s)"
        );
    }
}

/// Waits on the real clock, because the directory watch reacts to real file events.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after 60s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watched_directory_follows_a_chunked_copy_an_atomic_rename_and_a_removal() {
    let (dir, path) = plugin_dir();
    let h = Harness::start([], WorkerConfig::default()).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let loader = h.loader(engine());
    loader.load_dir(dir.path()).await.expect("read dir");
    let v1 = serving_version(&h).expect("v1 serves");
    let watcher = tokio::spawn({
        let (dir, shutdown) = (dir.path().to_owned(), shutdown.clone());
        async move { jobhost::reload::watch(loader, &dir, shutdown).await }
    });

    // A plain `cp`: truncate, then write in chunks with pauses, as a slow copy would.
    let v2 = fixture("versioned-v2");
    let file = std::fs::File::create(&path).expect("truncate");
    let mut writer = std::io::BufWriter::new(file);
    for chunk in v2.chunks(v2.len() / 8 + 1) {
        std::io::Write::write_all(&mut writer, chunk).expect("write");
        std::io::Write::flush(&mut writer).expect("flush");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            serving_version(&h).is_some(),
            "a half-written file never unloads the plugin"
        );
    }
    drop(writer);
    until("v2 to replace v1", || {
        serving_version(&h).is_some_and(|v| v != v1)
    })
    .await;
    let v2_version = serving_version(&h).expect("v2 serves");

    let staged = dir.path().join(".versioned.wasm.tmp");
    std::fs::write(&staged, fixture("versioned")).expect("stage");
    std::fs::rename(&staged, &path).expect("rename");
    until("the renamed v1 to replace v2", || {
        serving_version(&h).is_some_and(|v| v != v2_version)
    })
    .await;
    assert_eq!(
        serving_version(&h).as_deref(),
        Some(v1.as_str()),
        "the same bytes, the same version"
    );

    std::fs::remove_file(&path).expect("remove");
    until("the removal to unload the plugin", || {
        serving_version(&h).is_none()
    })
    .await;
    shutdown.cancel();
    watcher.await.expect("watcher task").expect("watch");
    h.shutdown().await;
}
