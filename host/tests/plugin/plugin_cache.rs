//! The compiled-plugin cache trusts nothing it did not write: forged, moved or symlinked
//! entries are compiled again from the `.wasm`, and a directory open to others is closed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use jobhost::job::Outcome;
use jobhost::plugin::{Engine, EngineConfig};

use crate::support::plugin::{engine_with, fixture, invocation, test_config, try_load};

fn engine_on(cache: &Path) -> Engine {
    engine_with(EngineConfig {
        cache_dir: Some(cache.to_owned()),
        ..test_config()
    })
}

/// The one `.cwasm` entry of `cache`.
fn entry(cache: &Path) -> PathBuf {
    let entries: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("the cache is readable")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one compiled plugin in {cache:?}: {entries:?}"
    );
    entries.into_iter().next().expect("one entry")
}

/// A cache at `dir` holding the compiled `noop` fixture; returns its entry.
async fn cache_with_noop(dir: &Path) -> PathBuf {
    try_load(&engine_on(dir), fixture("noop"))
        .await
        .expect("noop loads");
    entry(dir)
}

/// Load `noop` on a fresh engine over `cache` (a restart), asserting that it was compiled
/// again and that the job runs the real `noop`.
async fn assert_recompiled_and_real(cache: &Path, why: &str) {
    let engine = engine_on(cache);
    let plugin = try_load(&engine, fixture("noop"))
        .await
        .expect("noop loads");
    assert_eq!(
        engine.compilations(),
        1,
        "{why}: the plugin is compiled again"
    );
    assert!(plugin.compiled_fresh(), "{why}");
    let outcome = plugin.invoke(invocation("noop.Noop", b"{}")).await;
    assert!(
        matches!(outcome, Outcome::Completed { .. }),
        "{why}: the job runs the real plugin, not the planted code: {outcome:?}"
    );
}

#[tokio::test]
async fn a_forged_artifact_where_the_host_looks_is_never_executed() {
    // A real, loadable artifact of another plugin, compiled by another host (cache): the
    // most convincing forgery there is, short of the key.
    let elsewhere = tempfile::tempdir().expect("a temporary cache directory");
    try_load(&engine_on(elsewhere.path()), fixture("panic"))
        .await
        .expect("panic loads");
    let planted = std::fs::read(entry(elsewhere.path())).expect("the other artifact reads");

    let cache = tempfile::tempdir().expect("a temporary cache directory");
    let noop_entry = cache_with_noop(cache.path()).await;
    std::fs::write(&noop_entry, &planted).expect("the forgery is planted");
    assert_recompiled_and_real(cache.path(), "a forged entry").await;

    let mut rewritten = std::fs::read(&noop_entry).expect("the entry reads");
    assert_ne!(rewritten, planted, "the forged entry is replaced");
    // A flipped bit anywhere after the tag fails authentication too.
    let last = rewritten.len() - 1;
    rewritten[last] ^= 1;
    std::fs::write(&noop_entry, &rewritten).expect("the entry is altered");
    assert_recompiled_and_real(cache.path(), "an altered entry").await;
}

#[tokio::test]
async fn a_symlinked_cache_entry_is_refused_even_when_it_points_to_an_authentic_artifact() {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    let noop_entry = cache_with_noop(cache.path()).await;
    let target = cache.path().join("elsewhere");
    std::fs::rename(&noop_entry, &target).expect("the entry moves");
    std::os::unix::fs::symlink(&target, &noop_entry).expect("a symbolic link takes its place");

    assert_recompiled_and_real(cache.path(), "a symlinked entry").await;
    let replaced = std::fs::symlink_metadata(&noop_entry).expect("the entry exists");
    assert!(
        replaced.file_type().is_file(),
        "the link is replaced by a regular file"
    );
}

#[tokio::test]
async fn a_cache_directory_open_to_other_users_is_closed_and_its_key_replaced() {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    cache_with_noop(cache.path()).await;
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(cache.path()), 0o700, "the cache is private");
    assert_eq!(
        mode(&cache.path().join("cache.key")),
        0o600,
        "the key is private"
    );

    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777))
        .expect("the cache is opened up");
    // Another user may have read or replaced the key: entries signed with it are
    // compiled again under a new one.
    assert_recompiled_and_real(cache.path(), "a cache that was open to others").await;
    assert_eq!(mode(cache.path()), 0o700, "the host closed the cache again");
}

#[tokio::test]
async fn a_cache_key_readable_by_others_is_replaced() {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    cache_with_noop(cache.path()).await;
    let key = cache.path().join("cache.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644))
        .expect("the key is opened up");
    assert_recompiled_and_real(cache.path(), "a key readable by others").await;
}

#[tokio::test]
async fn a_cache_directory_that_is_a_symbolic_link_is_refused_with_a_clear_error() {
    let real = tempfile::tempdir().expect("a temporary directory");
    let parent = tempfile::tempdir().expect("a temporary directory");
    let link = parent.path().join("cache");
    std::os::unix::fs::symlink(real.path(), &link).expect("a symbolic link");
    let err = Engine::new(EngineConfig {
        cache_dir: Some(link.clone()),
        ..test_config()
    })
    .expect_err("the engine refuses the cache");
    let message = err.to_string();
    assert!(
        message.contains(&link.display().to_string()) && message.contains("symbolic link"),
        "the message names the directory and the cause: {message}"
    );
}
