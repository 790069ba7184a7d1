//! Loading a plugin: from bytes to a validated [`Plugin`] ready to run jobs.
//!
//! 1. Refuse what is not a component (random bytes, a core module) with a message that
//!    says which.
//! 2. Compile, or fetch the compiled artifact from the cache.
//! 3. Check the component's world: another version of `jobhost:plugin` is refused naming
//!    both versions; a component without the `handler` export is not a plugin.
//! 4. Link against WASI (nothing granted) and the `host` interface, once: the resulting
//!    pre-instance is what every job instantiates.
//! 5. Instantiate once to call `manifest`, within [`EngineConfig::load_timeout`], and
//!    validate it. The deadline is kept twice, as for jobs: the epoch stops a guest running
//!    wasm, and a wall-clock watchdog stops one blocked in a host call (a WASI sleep). A
//!    plugin that has not answered by then is refused with [`LoadError::ManifestTimeout`],
//!    so a hostile plugin delays a load or a reload by the deadline at most. The manifest
//!    itself is lifted whole by wasmtime (an export's result cannot be read in place), so
//!    its size is bounded by the guest's memory cap, once per load.
//!
//! A plugin's [`Identity`] (what its grants are looked up by) comes from its file: the
//! file's stem and the sha256 of its bytes, computed once here and shared with the
//! artifact cache's key and the version. The manifest's name is a display name: the
//! plugin's log tags, its metrics and admin views; the registry keeps it unique among
//! loaded plugins, but it decides nothing about grants.
//!
//! [`EngineConfig::load_timeout`]: super::EngineConfig::load_timeout

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use uuid::Uuid;
use wasmtime::component::Component;
use wasmtime::{Store, Trap};

use super::bindings::{PluginPre, types as wit};
use super::cache;
use super::engine::{BACKSTOP_GRACE, Engine, MEMORIES_PER_COMPONENT};
use super::error::LoadError;
use super::guest_log::LogTags;
use super::manifest;
use super::store::{JobState, StoreSetup, new_store};
use super::watchdog::Watchdog;
use crate::grants::{Grants, Identity};
use crate::job::Manifest;

macro_rules! wit_version {
    () => {
        "0.5.0"
    };
}

/// The version of the `jobhost:plugin` WIT package this host speaks.
pub const WIT_VERSION: &str = wit_version!();

const WIT_PACKAGE: &str = "jobhost:plugin";
const HANDLER_EXPORT: &str = concat!("jobhost:plugin/handler@", wit_version!());

/// Hex digits of the content hash kept as the plugin's version.
const VERSION_DIGITS: usize = 12;

/// A loaded plugin: compiled, linked, its manifest validated. Cheap to clone.
///
/// Jobs already running keep the `Plugin` they started with, so replacing a plugin on
/// reload never disturbs them.
#[derive(Clone)]
pub struct Plugin {
    pub(super) inner: Arc<PluginInner>,
}

pub(super) struct PluginInner {
    pub(super) engine: Engine,
    /// The manifest's name: the plugin's log tag.
    pub(super) name: Arc<str>,
    /// What its grants are looked up by.
    pub(super) identity: Identity,
    pub(super) pre: PluginPre<JobState>,
    /// Its linear memories: the memory permits each of its jobs takes in a wide pool.
    pub(super) memories: u32,
    version: String,
    path: PathBuf,
    manifest: Manifest,
    compiled_fresh: bool,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name())
            .field("version", &self.version())
            .field("path", &self.path())
            .field("manifest", self.manifest())
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The name the plugin gives itself in its manifest: how logs, metrics and the admin
    /// API label it; never what its grants are looked up by (see [`Plugin::identity`]).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Who the plugin is to its grants: its file's stem and its binary's sha256.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// A short hex digest of the file's contents: equal versions are equal files.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// The file the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The plugin's queues and jobs, validated.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// Whether this load compiled the plugin, as opposed to reading the compiled-artifact
    /// cache.
    pub fn compiled_fresh(&self) -> bool {
        self.inner.compiled_fresh
    }
}

pub(super) fn load(engine: &Engine, origin: &Path, bytes: &[u8]) -> Result<Plugin, LoadError> {
    let path = || origin.to_owned();
    check_binary_kind(origin, bytes)?;
    let content_hash = hex(&Sha256::digest(bytes));
    let identity = Identity::of_file(origin, content_hash.as_str());
    let (component, compiled_fresh) =
        cache::compile_or_fetch(&engine.inner, origin, &content_hash, bytes)?;
    check_world(engine, origin, &component)?;
    // A component that instantiates modules it imports says nothing: count it as the most.
    let memories = component
        .resources_required()
        .map_or(MEMORIES_PER_COMPONENT, |needs| needs.num_memories);
    let link_error = |err: wasmtime::Error| LoadError::Link {
        path: path(),
        reason: format!("{err:#}"),
    };
    let pre = engine
        .inner
        .linker
        .instantiate_pre(&component)
        .map_err(link_error)?;
    let pre = PluginPre::new(pre).map_err(link_error)?;
    let manifest = read_manifest(engine, origin, &identity, &pre)?;
    let manifest = manifest::from_wit(manifest).map_err(|cause| LoadError::Manifest {
        path: path(),
        cause,
    })?;
    let mut version = content_hash;
    version.truncate(VERSION_DIGITS);
    let inner = PluginInner {
        engine: engine.clone(),
        name: manifest.name.as_str().into(),
        identity,
        pre,
        memories,
        version,
        path: path(),
        manifest,
        compiled_fresh,
    };
    Ok(Plugin {
        inner: Arc::new(inner),
    })
}

/// Because wasmtime's parser reports a core module or a non-wasm file as a parse error
/// deep in the binary, the header is checked first to say plainly what the file is.
fn check_binary_kind(origin: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    const MAGIC: &[u8] = b"\0asm";
    const CORE_MODULE_VERSION: &[u8] = &[1, 0, 0, 0];
    match bytes.strip_prefix(MAGIC) {
        None => Err(LoadError::NotWasm {
            path: origin.to_owned(),
        }),
        Some(rest) if rest.starts_with(CORE_MODULE_VERSION) => Err(LoadError::CoreModule {
            path: origin.to_owned(),
        }),
        Some(_) => Ok(()),
    }
}

/// Refuse another version of the contract by name before linking would refuse it with
/// a message about a missing import.
fn check_world(engine: &Engine, origin: &Path, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    let wasmtime = &engine.inner.wasmtime;
    let imports = ty.imports(wasmtime).map(|(name, _)| name);
    let exports: Vec<&str> = ty.exports(wasmtime).map(|(name, _)| name).collect();
    for name in imports.chain(exports.iter().copied()) {
        if let Some(found) = other_contract_version(name) {
            return Err(LoadError::WitVersion {
                path: origin.to_owned(),
                found: found.to_owned(),
            });
        }
    }
    if !exports.contains(&HANDLER_EXPORT) {
        return Err(LoadError::NotAPlugin {
            path: origin.to_owned(),
            export: HANDLER_EXPORT,
        });
    }
    Ok(())
}

/// The version of `jobhost:plugin` an interface name refers to, if not ours.
fn other_contract_version(interface: &str) -> Option<&str> {
    let rest = interface.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    let version = rest
        .split_once('@')
        .map_or("(unversioned)", |(_, version)| version);
    (version != WIT_VERSION).then_some(version)
}

fn read_manifest(
    engine: &Engine,
    origin: &Path,
    identity: &Identity,
    pre: &PluginPre<JobState>,
) -> Result<wit::Manifest, LoadError> {
    let inner = &engine.inner;
    let config = &inner.config;
    let timeout = config.load_timeout;
    let timed_out = || LoadError::ManifestTimeout {
        path: origin.to_owned(),
        timeout,
    };
    let _slot = wasmtime_wasi::runtime::in_tokio(inner.load_permit.acquire())
        .expect("the load semaphore is never closed");
    let plugin: Arc<str> = origin.display().to_string().into();
    let tags = LogTags::new(&plugin, "manifest", Uuid::nil(), 0, None);
    // The manifest call is granted nothing: a plugin's grants are for its jobs.
    let mut store = new_store(
        &inner.wasmtime,
        tags,
        StoreSetup {
            memory_cap: config.memory_limit,
            timeout,
            budget: config.host_calls.clone(),
            grants: Arc::new(Grants::none(crate::grants::FILE_NAME)),
            plugin: identity.clone(),
            job_id: Uuid::nil(),
            batch: None,
            tape: None,
        },
    );
    let watchdog =
        Watchdog::start(timeout + BACKSTOP_GRACE).map_err(|err| LoadError::ManifestCall {
            path: origin.to_owned(),
            reason: format!("cannot start the load deadline's thread: {err}"),
        })?;
    match call_manifest(&mut store, pre, watchdog) {
        None => Err(timed_out()),
        Some(Ok(manifest)) => Ok(manifest),
        Some(Err(err)) if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => Err(timed_out()),
        Some(Err(err)) => Err(LoadError::ManifestCall {
            path: origin.to_owned(),
            reason: store.data().crash_reason(&err, timeout),
        }),
    }
}

/// Instantiate and call `manifest`; `None` if the watchdog fired first.
fn call_manifest(
    store: &mut Store<JobState>,
    pre: &PluginPre<JobState>,
    watchdog: Watchdog,
) -> Option<wasmtime::Result<wit::Manifest>> {
    wasmtime_wasi::runtime::in_tokio(async {
        let call = async {
            let instance = pre.instantiate_async(&mut *store).await?;
            instance
                .jobhost_plugin_handler()
                .call_manifest(&mut *store)
                .await
        };
        tokio::select! {
            result = call => Some(result),
            () = watchdog.fired() => None,
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_export_names_the_version_this_host_speaks() {
        assert_eq!(
            HANDLER_EXPORT,
            format!("{WIT_PACKAGE}/handler@{WIT_VERSION}")
        );
    }

    #[test]
    fn only_other_versions_of_the_contract_are_reported() {
        assert_eq!(
            other_contract_version("jobhost:plugin/host@0.0.1"),
            Some("0.0.1")
        );
        assert_eq!(
            other_contract_version("jobhost:plugin/handler@0.1.0"),
            Some("0.1.0")
        );
        assert_eq!(
            other_contract_version("jobhost:plugin/host"),
            Some("(unversioned)")
        );
        assert_eq!(
            other_contract_version(HANDLER_EXPORT),
            None,
            "our own version is no mismatch"
        );
        assert_eq!(
            other_contract_version("wasi:cli/stdout@0.2.6"),
            None,
            "other packages are ignored"
        );
        assert_eq!(
            other_contract_version("jobhost:plugins/host@9.9.9"),
            None,
            "a package whose name merely starts like ours is another package"
        );
    }

    #[test]
    fn the_header_tells_a_core_module_from_a_component_and_from_random_bytes() {
        let path = Path::new("plugins/x.wasm");
        assert!(matches!(
            check_binary_kind(path, b"\0asm\x01\0\0\0"),
            Err(LoadError::CoreModule { .. })
        ));
        assert!(matches!(
            check_binary_kind(path, b"\x7fELF\x02\x01"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(
            check_binary_kind(path, b""),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(
            check_binary_kind(path, b"\0asm\x0d\0\x01\0").is_ok(),
            "a component header passes"
        );
    }
}
