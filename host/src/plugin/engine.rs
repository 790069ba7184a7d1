//! The host's one wasmtime engine, configured for many short jobs in fresh instances.
//!
//! Defaults, and why:
//! - **Component model, async calls.** Plugins are components; every call is async so a
//!   running guest can yield to the runtime.
//! - **Pooling allocator**, sized by [`EngineConfig::max_instances`] and tuned
//!   (`pagemap_scan` where the kernel has it, 4 MiB of linear memory and 64 KiB of tables
//!   kept resident per slot): a fresh instance per job then costs ~15 µs instead of ~70.
//! - **Back-pressure before the pool.** A full pool fails instantiation instead of waiting,
//!   so jobs take a permit of a semaphore first: `max_instances - 1` permits for jobs, and
//!   one slot kept for loads, so a reload is never starved by busy workers.
//! - **Epoch interruption**, ticked every [`EPOCH_TICK`] by a thread that holds only a weak
//!   reference to the engine and stops once the engine is dropped.
//! - **Memory:** each linear memory may grow to [`EngineConfig::memory_limit`] inside a
//!   [`MEMORY_RESERVATION`] of address space (which lets compiled code skip bounds checks).
//!   A pool slot holds two memories, one in a pool wider than [`WIDE_POOL`]; a pool
//!   whose memories would reserve more than half of the process's address space is
//!   refused, saying so.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::component::Linker;
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::budget::HostCallBudget;
use super::cache::ArtifactCache;
use super::error::{EngineError, LoadError};
use super::load::{self, Plugin};
use super::store::JobState;
use super::{config_store, host_api, outbound};
use crate::files::{self, Rules};
use crate::grants::{self, Grants, SharedGrants};

/// How often the epoch advances: the granularity of timeouts and of a spinning guest's
/// yields to the async runtime.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Address space reserved per linear memory, the most a 32-bit memory can address.
pub const MEMORY_RESERVATION: u64 = 4 << 30;

pub(super) const MIB: usize = 1024 * 1024;

/// The default of [`EngineConfig::max_plugin_size`]: 64 MiB, room for components that
/// carry a JavaScript or Python runtime (tens of MiB), far below what would strain memory.
pub const DEFAULT_MAX_PLUGIN_SIZE: u64 = 64 << 20;

/// How long after a call's deadline a second timer backs up the epoch: a few ticks, so a
/// guest running wasm is always stopped by the epoch, as a trap, and only one blocked in a
/// host call (where epochs are not checked) by the backstop.
pub(super) const BACKSTOP_GRACE: Duration = EPOCH_TICK.saturating_mul(5);

/// Generous per-component maxima for what a pool slot holds; a component needing more is
/// refused at load, when its manifest is read.
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
pub(super) const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 8;

/// The most pool slots that each hold [`MEMORIES_PER_COMPONENT`] linear memories. A larger
/// pool (a host of more than 1,023 jobs at once, which mostly wait) gives its job slots one
/// memory each, what a component built by `cargo` for `wasm32-wasip2` has: a memory is a
/// [`MEMORY_RESERVATION`] of address space, and two per slot would stop a host near 15,000
/// jobs. A job then takes as many memory permits as its plugin has memories, so a plugin
/// of two memories runs at most half as many jobs at once instead of failing to
/// instantiate; the slot kept for loads keeps its two.
pub(super) const WIDE_POOL: u32 = 1024;

/// Address space reserved per linear memory besides [`MEMORY_RESERVATION`]: wasmtime's
/// default guard of 32 MiB after each memory.
const MEMORY_GUARD: u64 = 32 << 20;

/// The address space a process may take on this machine: 47 bits on x86-64 and 48 on
/// aarch64 (Linux gives more only to a process that asks), or less under `ulimit -v`.
fn address_space() -> u64 {
    let bits = if cfg!(target_arch = "aarch64") {
        48
    } else {
        47
    };
    let limit = rustix::process::getrlimit(rustix::process::Resource::As)
        .current
        .unwrap_or(u64::MAX);
    (1u64 << bits).min(limit)
}

/// Linear memories a job slot holds in a pool of `slots`: see [`WIDE_POOL`].
fn memories_per_job(slots: u32) -> u32 {
    if slots <= WIDE_POOL {
        MEMORIES_PER_COMPONENT
    } else {
        1
    }
}

/// The linear memories of a pool of `slots`: each job slot's, and two for the load slot.
fn total_memories(slots: u32) -> u32 {
    (slots - 1)
        .saturating_mul(memories_per_job(slots))
        .saturating_add(MEMORIES_PER_COMPONENT)
}

/// Settings of an [`Engine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Instances alive at once (the pool size), at least 2: `max_instances - 1` jobs run
    /// concurrently and one slot is kept for loads. Default 64.
    pub max_instances: u32,
    /// The most one linear memory of a job may grow to, in bytes; at most
    /// [`MEMORY_RESERVATION`]. Default 128 MiB.
    pub memory_limit: usize,
    /// How long loading a plugin may spend instantiating it and calling its `manifest`;
    /// a plugin that has not answered by then is refused. Default 10 s. (A job's timeout
    /// comes with its [`Invocation`](crate::job::Invocation).)
    pub load_timeout: Duration,
    /// What one job may hand the host through its imports. Default
    /// [`HostCallBudget::default`].
    pub host_calls: HostCallBudget,
    /// The most bytes a plugin file may hold; a larger one is refused from its size,
    /// before it is read. Default [`DEFAULT_MAX_PLUGIN_SIZE`].
    pub max_plugin_size: u64,
    /// Where compiled plugins are cached so a restart does not recompile them; `None`
    /// compiles every load. Default `None`. The directory must be this user's own: it is
    /// created `0700`, and every entry is authenticated before it is loaded (see
    /// [`Engine::new`]).
    pub cache_dir: Option<PathBuf>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_instances: 64,
            memory_limit: 128 * MIB,
            load_timeout: Duration::from_secs(10),
            host_calls: HostCallBudget::default(),
            max_plugin_size: DEFAULT_MAX_PLUGIN_SIZE,
            cache_dir: None,
        }
    }
}

/// The host's plugin engine: compiles and loads plugins and runs their jobs.
///
/// Cheap to clone (an `Arc` inside); create one per host, since plugins loaded by one
/// engine share its pool and its job permits.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<EngineInner>,
}

pub(super) struct EngineInner {
    pub(super) wasmtime: wasmtime::Engine,
    pub(super) linker: Linker<JobState>,
    pub(super) config: EngineConfig,
    /// Permits for job instances, fewer than the pool's slots.
    pub(super) job_permits: Semaphore,
    /// In a pool wider than [`WIDE_POOL`], permits for the job slots' linear memories, one
    /// per memory: a job takes as many as its plugin has. `None` where every slot holds as
    /// many memories as a plugin may have.
    pub(super) memory_permits: Option<Semaphore>,
    /// The one pool slot kept for a load's manifest call.
    pub(super) load_permit: Semaphore,
    /// Identifies the compiler settings, so cached artifacts of another engine are not read.
    pub(super) fingerprint: u64,
    /// The compiled-artifact cache, when [`EngineConfig::cache_dir`] names one.
    pub(super) cache: Option<ArtifactCache>,
    pub(super) compilations: AtomicU64,
    /// What the operator grants each plugin; each job reads them when it starts.
    pub(super) grants: SharedGrants,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .field(
                "fingerprint",
                &format_args!("{:016x}", self.inner.fingerprint),
            )
            .field("compilations", &self.compilations())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine with `config`; starts the epoch ticker thread and opens the cache
    /// directory: creates it `0700` with a random key (`cache.key`, `0600`) that
    /// authenticates each entry, closes one open to other users (replacing its key), and
    /// refuses one that belongs to another user or is a symbolic link.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        check(&config)?;
        let wasmtime_error = |err: wasmtime::Error| EngineError::Wasmtime {
            reason: format!("{err:#}"),
        };
        let wasmtime = wasmtime::Engine::new(&wasmtime_config(&config)).map_err(wasmtime_error)?;
        let mut linker = Linker::new(&wasmtime);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(wasmtime_error)?;
        host_api::add_to_linker(&mut linker).map_err(wasmtime_error)?;
        // Linked for every plugin, used only by those that import them: a plugin without
        // grants still links, and its requests fail with the refusal that names the grant.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(wasmtime_error)?;
        outbound::add_budget_to_linker(&mut linker).map_err(wasmtime_error)?;
        config_store::add_to_linker(&mut linker).map_err(wasmtime_error)?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(ArtifactCache::open)
            .transpose()?;
        start_ticker(&wasmtime)?;
        let mut hasher = DefaultHasher::new();
        wasmtime.precompile_compatibility_hash().hash(&mut hasher);
        let jobs = config.max_instances as usize - 1;
        let inner = EngineInner {
            fingerprint: hasher.finish(),
            wasmtime,
            linker,
            job_permits: Semaphore::new(jobs),
            memory_permits: (config.max_instances > WIDE_POOL)
                .then(|| Semaphore::new(jobs * memories_per_job(config.max_instances) as usize)),
            load_permit: Semaphore::new(1),
            config,
            cache,
            compilations: AtomicU64::new(0),
            // A section without `max_concurrent_requests` gets a request slot per job.
            grants: SharedGrants::with_job_concurrency(Grants::none(grants::FILE_NAME), jobs),
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Read, compile (or fetch from the cache), link and validate the plugin at `path`.
    ///
    /// The file is read as untrusted ([`crate::files`]): a regular file (a symbolic link
    /// is followed and its target checked) of at most [`EngineConfig::max_plugin_size`].
    ///
    /// Blocking: compiling takes tens of milliseconds and the manifest call runs here, for
    /// at most [`EngineConfig::load_timeout`]. Call it from `spawn_blocking` or a plain
    /// thread, never from async code (it panics inside a runtime's worker thread).
    pub fn load(&self, path: &Path) -> Result<Plugin, LoadError> {
        let rules = Rules::capped(
            self.inner.config.max_plugin_size,
            "a plugin may hold (`--max-plugin-size`)",
        );
        let bytes = files::read(path, &rules).map_err(|cause| LoadError::Read {
            path: path.to_owned(),
            cause,
        })?;
        self.load_bytes(path, &bytes)
    }

    /// Like [`Engine::load`], with the file already read; `origin` names it in messages
    /// and is what [`Plugin::path`] returns.
    pub fn load_bytes(&self, origin: &Path, bytes: &[u8]) -> Result<Plugin, LoadError> {
        load::load(self, origin, bytes)
    }

    /// The settings this engine was created with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// How many pool slots are taken now: one per running job, and one while a load
    /// calls its plugin's manifest.
    pub fn instances_in_use(&self) -> usize {
        let inner = &self.inner;
        let jobs = (inner.config.max_instances as usize - 1)
            .saturating_sub(inner.job_permits.available_permits());
        jobs + 1usize.saturating_sub(inner.load_permit.available_permits())
    }

    /// What the operator grants each plugin: none until [`SharedGrants::replace`] puts the
    /// grants file's in force; each job takes the grants in force when it starts.
    pub fn grants(&self) -> &SharedGrants {
        &self.inner.grants
    }

    /// How many plugins this engine compiled, as opposed to fetched from the cache.
    pub fn compilations(&self) -> u64 {
        self.inner.compilations.load(Ordering::Relaxed)
    }
}

fn check(config: &EngineConfig) -> Result<(), EngineError> {
    if config.max_instances < 2 {
        return Err(EngineError::Config {
            setting: "max_instances",
            reason: format!("is {}; it must be at least 2", config.max_instances),
        });
    }
    let max_memory = usize::try_from(MEMORY_RESERVATION).unwrap_or(usize::MAX);
    if config.memory_limit == 0 || config.memory_limit > max_memory {
        return Err(EngineError::Config {
            setting: "memory_limit",
            reason: format!(
                "is {} bytes; it must be 1..={max_memory}",
                config.memory_limit
            ),
        });
    }
    let per_memory = MEMORY_RESERVATION + MEMORY_GUARD;
    let reserved = u64::from(total_memories(config.max_instances)).saturating_mul(per_memory);
    // Half of what the process may address, the rest left to its stacks, tables, heap and
    // libraries.
    let room = address_space() / 2;
    if reserved > room {
        return Err(EngineError::Config {
            setting: "max_instances",
            reason: format!(
                "is {} (a host's `--concurrency` and the slot kept for loads): its pool \
                 would reserve {} GiB of address space (a linear memory per job slot, {} GiB each with its guard, which lets compiled code skip bounds \
                 checks), more than the {} GiB this process may give it (half of what it may \
                 address, {} GiB here); run fewer jobs at once per host, and more hosts",
                config.max_instances,
                reserved >> 30,
                per_memory as f64 / f64::from(1u32 << 30),
                room >> 30,
                address_space() >> 30,
            ),
        });
    }
    if config.max_plugin_size == 0 {
        return Err(EngineError::Config {
            setting: "max_plugin_size",
            reason: "is zero; it must be positive".to_owned(),
        });
    }
    if config.load_timeout.is_zero() {
        return Err(EngineError::Config {
            setting: "load_timeout",
            reason: "is zero; it must be positive".to_owned(),
        });
    }
    Ok(())
}

fn wasmtime_config(config: &EngineConfig) -> Config {
    let slots = config.max_instances;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .total_memories(total_memories(slots))
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .total_tables(slots.saturating_mul(TABLES_PER_COMPONENT))
        .total_stacks(slots)
        .max_memory_size(config.memory_limit)
        // Measured on 2-core machines: both settings together make a fresh instance per
        // job 2-4x cheaper than either alone; `Auto` still starts on kernels without
        // `PAGEMAP_SCAN`.
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(4 * MIB)
        .table_keep_resident(64 * 1024);
    let mut wasmtime = Config::new();
    wasmtime
        .wasm_component_model(true)
        .epoch_interruption(true)
        .memory_reservation(MEMORY_RESERVATION)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasmtime
}

/// Advance the epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_ticker(engine: &wasmtime::Engine) -> Result<(), EngineError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("jobhost-epoch".to_owned())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
        .map_err(|cause| EngineError::Ticker { cause })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_pool_holds_one_memory_per_job_slot_and_ten_thousand_jobs_start() {
        assert_eq!(total_memories(64), 128, "the default pool is unchanged");
        assert_eq!(total_memories(WIDE_POOL), 2 * WIDE_POOL);
        assert_eq!(total_memories(10_001), 10_002);
        let engine = Engine::new(EngineConfig {
            max_instances: 10_001,
            ..EngineConfig::default()
        })
        .expect("a pool of 10,001 slots fits this machine's address space");
        assert_eq!(
            engine
                .inner
                .memory_permits
                .as_ref()
                .map(Semaphore::available_permits),
            Some(10_000)
        );
    }

    #[test]
    fn a_pool_beyond_the_address_space_is_refused_saying_why() {
        let err = Engine::new(EngineConfig {
            max_instances: 60_000,
            ..EngineConfig::default()
        })
        .expect_err("60,000 memories of 4 GiB do not fit");
        let message = err.to_string();
        assert!(
            message.contains("is 60000 (a host's `--concurrency` and the slot kept for loads)")
                && message.contains("GiB of address space")
                && message.contains("run fewer jobs at once per host"),
            "{message}"
        );
    }
}
