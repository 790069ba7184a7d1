//! Loading: what is refused and why, the manifest, and the compiled-artifact cache.

use std::path::Path;
use std::time::Duration;

use jobhost::plugin::{EngineConfig, LoadError, WIT_VERSION};
use jobhost_sdk::{Backoff, RetryPolicy};

use crate::support::plugin::{engine_with, fixture, load, shared_engine, test_config, try_load};

/// Load `bytes` written to `name` in a fresh directory, expecting a refusal.
async fn refusal(name: &str, bytes: &[u8]) -> (LoadError, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("the file is written");
    let err = try_load(&shared_engine(), path.clone())
        .await
        .expect_err("the file is refused");
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "the message names the file: {message}"
    );
    (err, message)
}

#[tokio::test]
async fn random_bytes_are_refused_as_not_webassembly() {
    let (err, message) = refusal("random.wasm", b"\x7fELF\x02\x01\x01 definitely not wasm").await;
    assert!(matches!(err, LoadError::NotWasm { .. }), "{message}");
    assert!(message.ends_with("is not a WebAssembly file"), "{message}");
}

#[tokio::test]
async fn a_core_module_is_refused_as_not_a_component() {
    // The smallest valid core module: the magic number and version 1.
    let (err, message) = refusal("core.wasm", b"\0asm\x01\0\0\0").await;
    assert!(matches!(err, LoadError::CoreModule { .. }), "{message}");
    assert!(
        message.contains("core WebAssembly module, not a component"),
        "{message}"
    );
}

#[tokio::test]
async fn a_truncated_component_is_refused_with_the_compiler_message() {
    let (err, message) = refusal("truncated.wasm", b"\0asm\x0d\0\x01\0\x01\x7f").await;
    assert!(matches!(err, LoadError::Compile { .. }), "{message}");
    assert!(message.starts_with("cannot compile `"), "{message}");
}

#[tokio::test]
async fn a_missing_file_is_refused_naming_it() {
    let path = Path::new("/nonexistent/plugins/ghost.wasm");
    let err = try_load(&shared_engine(), path.to_owned())
        .await
        .expect_err("nothing to load");
    assert!(matches!(err, LoadError::Read { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("cannot read plugin `/nonexistent/plugins/ghost.wasm`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_component_of_another_world_is_refused_as_not_a_plugin() {
    let err = try_load(&shared_engine(), fixture("other-world"))
        .await
        .expect_err("not a plugin");
    let message = err.to_string();
    assert!(matches!(err, LoadError::NotAPlugin { .. }), "{message}");
    assert!(
        message.contains("other-world.wasm"),
        "the message names the file: {message}"
    );
    assert!(
        message.contains(&format!(
            "does not export `jobhost:plugin/handler@{WIT_VERSION}`"
        )),
        "{message}"
    );
}

#[tokio::test]
async fn a_plugin_built_against_another_contract_version_is_refused_saying_so() {
    let err = try_load(&shared_engine(), fixture("old-version"))
        .await
        .expect_err("another version");
    let message = err.to_string();
    assert!(matches!(err, LoadError::WitVersion { .. }), "{message}");
    assert!(
        message.contains("old-version.wasm"),
        "the message names the file: {message}"
    );
    assert!(
        message.contains(&format!(
            "was built against jobhost:plugin@0.0.1, this host speaks {WIT_VERSION}"
        )),
        "{message}"
    );
}

#[tokio::test]
async fn the_manifest_is_read_at_load_with_names_policies_and_the_content_version() {
    let plugin = load("scripted").await;
    assert_eq!(plugin.name(), "scripted");
    assert_eq!(plugin.path(), fixture("scripted"));
    assert_eq!(
        plugin.version().len(),
        12,
        "a short content hash: {}",
        plugin.version()
    );
    let manifest = plugin.manifest();
    let emails = manifest
        .queue("test.emails")
        .expect("the emails queue is declared");
    assert_eq!(
        emails.retry,
        RetryPolicy::new(
            3,
            Backoff::Exponential {
                base: Duration::from_secs(1),
                factor: 2.0,
                max: Duration::from_secs(120),
                jitter: false
            }
        )
    );
    let hasty = manifest
        .job("scripted.HastyEmail")
        .expect("the hasty job is declared");
    assert_eq!(hasty.queue, "test.emails");
    assert_eq!(hasty.retry, Some(RetryPolicy::new(2, Backoff::None)));
    let bare = manifest
        .queue("test.bare")
        .expect("the bare queue is declared");
    assert_eq!(
        bare.retry,
        RetryPolicy::default(),
        "a queue without a policy gets the default"
    );
}

#[tokio::test]
async fn a_plugin_is_compiled_once_and_then_read_from_the_cache_even_after_a_restart() {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    let config = EngineConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..test_config()
    };
    let engine = engine_with(config.clone());

    let first = try_load(&engine, fixture("noop"))
        .await
        .expect("noop loads");
    let second = try_load(&engine, fixture("noop"))
        .await
        .expect("noop loads again");
    assert!(first.compiled_fresh(), "the first load compiles");
    assert!(!second.compiled_fresh(), "the second load reads the cache");
    assert_eq!(engine.compilations(), 1);
    assert_eq!(
        first.version(),
        second.version(),
        "the same file has the same version"
    );

    let restarted = engine_with(config);
    let warm = try_load(&restarted, fixture("noop"))
        .await
        .expect("noop loads after a restart");
    assert!(
        !warm.compiled_fresh(),
        "a restart with the same cache does not compile"
    );
    assert_eq!(restarted.compilations(), 0);
}

#[tokio::test]
async fn a_corrupt_cache_entry_is_compiled_again() {
    let cache = tempfile::tempdir().expect("a temporary cache directory");
    let config = EngineConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..test_config()
    };
    let engine = engine_with(config);
    try_load(&engine, fixture("noop"))
        .await
        .expect("noop loads");
    for entry in std::fs::read_dir(cache.path()).expect("the cache is readable") {
        std::fs::write(entry.expect("a cache entry").path(), b"garbage")
            .expect("the entry is overwritten");
    }
    let reloaded = try_load(&engine, fixture("noop"))
        .await
        .expect("noop loads despite the corrupt cache");
    assert!(
        reloaded.compiled_fresh(),
        "a corrupt artifact is replaced by a fresh compile"
    );
}
