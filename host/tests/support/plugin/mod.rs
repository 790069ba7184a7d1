//! Shared by the `plugin_*` tests: one engine per test binary, fixtures loaded once, and
//! invocations with defaults.
//!
//! Because a debug build of cranelift takes seconds per plugin, the shared engine caches
//! compiled plugins in `CARGO_TARGET_TMPDIR` across runs and each test binary loads each
//! fixture once. Tests about loading itself create engines of their own.

pub mod floods;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use jobhost::job::Invocation;
use jobhost::plugin::{Engine, EngineConfig, LoadError, Plugin};
use jobhost::trace::JobTrace;
use uuid::Uuid;

/// The memory cap of test engines: small, so a memory bomb hits it quickly.
pub const MEMORY_LIMIT: usize = 32 * 1024 * 1024;

/// Generous for a job that should finish at once, on a loaded 2-core machine.
pub const PROMPTLY: Duration = Duration::from_secs(10);

static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
    let cache_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    engine_with(EngineConfig {
        cache_dir: Some(cache_dir),
        ..test_config()
    })
});

static LOADED: Mutex<BTreeMap<&str, Plugin>> = Mutex::new(BTreeMap::new());

/// The settings of test engines: a small pool and [`MEMORY_LIMIT`].
pub fn test_config() -> EngineConfig {
    EngineConfig {
        max_instances: 8,
        memory_limit: MEMORY_LIMIT,
        ..EngineConfig::default()
    }
}

/// The engine shared by the tests of one binary.
pub fn shared_engine() -> Engine {
    ENGINE.clone()
}

pub fn engine_with(config: EngineConfig) -> Engine {
    Engine::new(config).expect("the test engine starts")
}

pub fn fixture(name: &str) -> PathBuf {
    jobhost_fixtures::wasm(name)
}

/// Load a file on the blocking pool, as the host does.
pub async fn try_load(engine: &Engine, path: PathBuf) -> Result<Plugin, LoadError> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || engine.load(&path))
        .await
        .expect("load does not panic")
}

/// Fixture `name` on the shared engine, loaded once per test binary.
pub async fn load(name: &'static str) -> Plugin {
    tokio::task::spawn_blocking(move || {
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        let plugin = loaded.entry(name).or_insert_with(|| {
            let path = fixture(name);
            ENGINE
                .load(&path)
                .unwrap_or_else(|err| panic!("fixture `{name}` loads: {err}"))
        });
        plugin.clone()
    })
    .await
    .expect("fixtures load")
}

/// An invocation of a first attempt with a 30 s timeout.
pub fn invocation<'a>(job_type: &'a str, payload: &'a [u8]) -> Invocation<'a> {
    Invocation {
        job_id: Uuid::new_v4(),
        job_type,
        queue: "test.queue",
        attempt: 1,
        max_attempts: 3,
        deferrals: 0,
        priority: 0,
        age: Duration::from_millis(5),
        payload,
        batch: None,
        trace: JobTrace::start(None),
        timeout: Duration::from_secs(30),
        record: None,
    }
}

/// A size of this process from `/proc/self/status`: `VmRSS` (resident now) or `VmHWM`
/// (the peak since the last [`reset_peak`]).
pub fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} in kB"));
    kib * 1024
}

/// Start measuring the peak RSS anew (Linux `clear_refs`, value 5).
pub fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak RSS can be reset");
}
