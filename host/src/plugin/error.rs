//! Why an engine could not start or a plugin could not load.
//!
//! wasmtime's own errors are rendered into `reason` strings here, so no wasmtime type leaks
//! into the public API.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::load::WIT_VERSION;
use crate::job::ManifestError;

/// Why [`Engine::new`](super::Engine::new) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A setting of [`EngineConfig`](super::EngineConfig) is out of range.
    #[error("invalid engine setting `{setting}`: {reason}")]
    Config {
        /// The offending field.
        setting: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// wasmtime refused the configuration (e.g. the platform cannot reserve the pool).
    #[error("cannot create the wasmtime engine: {reason}")]
    Wasmtime {
        /// wasmtime's message.
        reason: String,
    },
    /// The epoch ticker thread could not be started.
    #[error("cannot start the epoch ticker thread: {cause}")]
    Ticker {
        /// The underlying failure.
        cause: io::Error,
    },
    /// The compiled-artifact cache directory could not be created, or is not this
    /// user's own.
    #[error("cannot use the compiled-plugin cache `{}`: {cause}", path.display())]
    CacheDir {
        /// The configured cache directory.
        path: PathBuf,
        /// The underlying failure.
        cause: io::Error,
    },
}

/// Why a plugin file was refused. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read plugin `{}`: {cause}", path.display())]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The underlying failure.
        cause: io::Error,
    },
    /// The file does not start with the WebAssembly magic number.
    #[error("`{}` is not a WebAssembly file", path.display())]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
    },
    /// The file is a core module, which cannot speak the component-model contract.
    #[error(
        "`{}` is a core WebAssembly module, not a component: build the plugin for `wasm32-wasip2`",
        path.display()
    )]
    CoreModule {
        /// The plugin file.
        path: PathBuf,
    },
    /// wasmtime could not validate or compile the component.
    #[error("cannot compile `{}`: {reason}", path.display())]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// wasmtime's message.
        reason: String,
    },
    /// The component imports or exports another version of the `jobhost:plugin` package.
    #[error(
        "`{}` was built against jobhost:plugin@{found}, this host speaks {WIT_VERSION}: rebuild it with a matching jobhost-sdk",
        path.display()
    )]
    WitVersion {
        /// The plugin file.
        path: PathBuf,
        /// The package version the component was built against.
        found: String,
    },
    /// The component does not export the `handler` interface: it targets another world.
    #[error(
        "`{}` does not export `{export}`: it is not a component of the jobhost `plugin` world",
        path.display()
    )]
    NotAPlugin {
        /// The plugin file.
        path: PathBuf,
        /// The export the host looked for.
        export: &'static str,
    },
    /// The component imports something the host does not provide.
    #[error("cannot link `{}`: {reason}", path.display())]
    Link {
        /// The plugin file.
        path: PathBuf,
        /// wasmtime's message, naming the missing import.
        reason: String,
    },
    /// Instantiating the component or calling its `manifest` export failed.
    #[error("`{}` failed while reporting its manifest: {reason}", path.display())]
    ManifestCall {
        /// The plugin file.
        path: PathBuf,
        /// The trap or instantiation failure.
        reason: String,
    },
    /// Instantiating the component and calling its `manifest` export did not finish within
    /// [`EngineConfig::load_timeout`](super::EngineConfig::load_timeout).
    #[error(
        "`{}` did not answer within the deadline of {timeout:?} while reporting its manifest: refused",
        path.display()
    )]
    ManifestTimeout {
        /// The plugin file.
        path: PathBuf,
        /// The deadline.
        timeout: Duration,
    },
    /// The manifest asks for something the host cannot honour.
    #[error("`{}` has an invalid manifest: {cause}", path.display())]
    Manifest {
        /// The plugin file.
        path: PathBuf,
        /// The first problem found.
        cause: ManifestError,
    },
}
