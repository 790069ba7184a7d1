//! Hot reload: the plugin directory is the source of truth for what the host serves.
//!
//! A new or changed `*.wasm` is compiled off the async runtime, validated and swapped into
//! the registry atomically; a removed one is unloaded. A file written in place is handled
//! only once it has been quiet for [`QUIET_PERIOD`], so a file copied in chunks is not
//! loaded half written; if a load still fails (a truncated copy, a broken build), the
//! refusal is logged with the file and the cause and the previous version keeps serving
//! until the file is fixed. An atomic rename into the directory is the preferred way to
//! deploy: a renamed file is complete, so it is loaded at once.
//!
//! The grants follow the files (see [`crate::grants`]), so the loader warns where they do
//! not meet: after loading the directory and after each grants reload, for a section that
//! matches no loaded plugin's file; and on each load and grants reload, for a plugin whose
//! binary is not the one its section pins (it runs without its grants).

mod watch;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jobhost_sdk::QueueConfig;
use tracing::{error, info, warn};

use crate::broker::BrokerError;
use crate::grants::{self, Grants, GrantsError, HostSecrets, Identity};
use crate::plugin::{Engine, LoadError, Plugin};
use crate::telemetry::{Event, Telemetry};
use crate::text::{SHOWN_REASON_MAX, bounded};
use crate::worker::{Handler, Plugins, RegistryError, Unit, Verdicts, on_probation};

pub use watch::{is_edit, watch};

/// How long a plugin file written in place must go without changes before it is loaded.
pub const QUIET_PERIOD: Duration = Duration::from_millis(150);

/// Why a plugin file was not loaded; what was loaded before keeps serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The file did not compile, link or validate.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The plugin conflicts with another loaded plugin.
    #[error("refused `{}`: {conflict}", path.display())]
    Conflict {
        /// The plugin file.
        path: PathBuf,
        /// The conflict; in the message, so not also a `source()`.
        conflict: RegistryError,
    },
    /// The broker refused a queue of the plugin for good, e.g. because it exists there as
    /// another queue type.
    #[error("refused `{}`: {error}", path.display())]
    Broker {
        /// The plugin file.
        path: PathBuf,
        /// The broker's refusal; in the message, so not also a `source()`.
        error: BrokerError,
    },
    /// The blocking load task failed.
    #[error("loading `{}` did not finish: {reason}", path.display())]
    Interrupted {
        /// The plugin file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What a sync of one file did.
pub use crate::job::PluginChange as Change;

/// Wraps each loaded plugin's handler, e.g. to record invocations in tests.
pub type WrapHandler = Arc<dyn Fn(Arc<dyn Handler>) -> Arc<dyn Handler> + Send + Sync>;

/// Declares one queue on the broker, as [`Backend::declare`](crate::broker::Backend::declare).
pub type DeclareQueue = Arc<
    dyn Fn(QueueConfig) -> Pin<Box<dyn Future<Output = Result<(), BrokerError>> + Send>>
        + Send
        + Sync,
>;

/// Loads plugin files into a registry.
#[derive(Clone)]
pub struct Loader {
    engine: Engine,
    plugins: Plugins,
    wrap: Option<WrapHandler>,
    declare: Option<DeclareQueue>,
    telemetry: Telemetry,
    grants_file: Option<PathBuf>,
    host_secrets: HostSecrets,
    /// The versions a probation rolled back: the same file is not tried again.
    rolled_back: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl fmt::Debug for Loader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("engine", &self.engine)
            .field("plugins", &self.plugins)
            .finish_non_exhaustive()
    }
}

impl Loader {
    /// A loader compiling with `engine` into `plugins`, whose changes nobody watches
    /// ([`Telemetry::none`]) until [`Loader::reporting`] names a telemetry.
    pub fn new(engine: Engine, plugins: Plugins) -> Self {
        Self {
            engine,
            plugins,
            wrap: None,
            declare: None,
            telemetry: Telemetry::none(),
            grants_file: None,
            host_secrets: HostSecrets::default(),
            rolled_back: Arc::default(),
        }
    }

    /// The same loader, reading the engine's grants from `file` (see [`crate::grants`]),
    /// whose secrets may not be read from `host_secrets`.
    pub fn granting(self, file: PathBuf, host_secrets: HostSecrets) -> Self {
        Self {
            grants_file: Some(file),
            host_secrets,
            ..self
        }
    }

    /// The grants file it reads, if any.
    pub fn grants_file(&self) -> Option<&Path> {
        self.grants_file.as_deref()
    }

    /// Read the grants file again and put its grants in force for the jobs that start from
    /// now on; a file that is refused is logged, and the grants in force stay. Blocking:
    /// the file is read here.
    pub fn reload_grants(&self) -> Result<(), GrantsError> {
        let Some(file) = &self.grants_file else {
            return Ok(());
        };
        match Grants::load(file, &self.host_secrets) {
            Ok(grants) => {
                let plugins = grants.plugins().count();
                self.engine.grants().replace(grants);
                info!(file = %file.display(), plugins, "grants loaded");
                self.warn_unmatched_sections();
                let (grants, registry) = (self.engine.grants().current(), self.plugins.current());
                for unit in registry.units() {
                    if let Some(id) = unit.identity() {
                        warn_pin(&grants, unit.key(), id);
                    }
                }
                Ok(())
            }
            Err(err) => {
                error!(error = %err, "grants file refused; the grants in force stay");
                Err(err)
            }
        }
    }

    /// The same loader, emitting what each sync of a plugin file did into `telemetry`
    /// ([`Event::PluginChanged`]): the host's metrics count the loads, replacements and
    /// refusals, and its activity keeps the reload history.
    pub fn reporting(self, telemetry: Telemetry) -> Self {
        Self { telemetry, ..self }
    }

    /// The same loader, wrapping the handler of every plugin it loads.
    pub fn wrapping(self, wrap: WrapHandler) -> Self {
        Self {
            wrap: Some(wrap),
            ..self
        }
    }

    /// The same loader, declaring each plugin's queues with `declare` before the plugin
    /// serves: a queue the broker refuses for good (it exists as another queue type, or
    /// with other arguments) refuses the plugin with the broker's reason, and the previous
    /// version keeps serving. A broker that cannot be reached does not refuse it: its
    /// consumers declare the queues once the broker is back.
    pub fn declaring(self, declare: DeclareQueue) -> Self {
        Self {
            declare: Some(declare),
            ..self
        }
    }

    /// The registry it loads into.
    pub fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    /// Load every `*.wasm` in `dir`, logging each load and each refusal; returns how many
    /// loaded.
    pub async fn load_dir(&self, dir: &Path) -> std::io::Result<usize> {
        let mut files = plugin_files(dir)?;
        files.sort();
        let mut loaded = 0;
        for file in files {
            if self.sync(&file).await.is_ok() {
                loaded += 1;
            }
        }
        self.warn_unmatched_sections();
        Ok(loaded)
    }

    /// Warn about every section of the grants in force that matches no loaded plugin's
    /// file.
    fn warn_unmatched_sections(&self) {
        let grants = self.engine.grants().current();
        let registry = self.plugins.current();
        for (section, _) in grants.plugins() {
            let matched = registry
                .units()
                .filter_map(Unit::identity)
                .any(|id| &*id.name == section);
            if !matched {
                warn!(
                    section,
                    grants = %grants.file().display(),
                    expected = %format!("{section}.wasm"),
                    "a grants section matches no loaded plugin; it grants nothing until the plugin file `{section}.wasm` in the plugin directory loads"
                );
            }
        }
    }

    /// Bring the registry in line with `path`: load it if it exists, unload it if not.
    pub async fn sync(&self, path: &Path) -> Result<Change, ReloadError> {
        let key = key_of(path);
        if !path.exists() {
            let removed = self.plugins.remove(&key);
            if removed {
                info!(file = %path.display(), "plugin file removed: its consumers stop once their jobs finish");
                self.record(&key, &Ok(Change::Removed));
                return Ok(Change::Removed);
            }
            return Ok(Change::Nothing);
        }
        let result = match self.load(path).await {
            Ok(plugin) => match self.declare_queues(path, &plugin).await {
                Ok(()) => self.install(path, &key, plugin),
                Err(refused) => Err(refused),
            },
            Err(refused) => Err(refused),
        };
        self.record(&key, &result);
        if let Err(err) = &result {
            let serving = self
                .plugins
                .current()
                .units()
                .find(|u| u.key() == key)
                .map(|u| u.version().to_owned());
            match serving {
                Some(version) => {
                    error!(error = %err, %version, "plugin refused; the previous version keeps serving")
                }
                None => error!(error = %err, "plugin refused"),
            }
        }
        result
    }

    /// Emit what the file `key` did.
    fn record(&self, key: &str, result: &Result<Change, ReloadError>) {
        let change = match result {
            Ok(change) => change.clone(),
            Err(err) => Change::Refused {
                cause: bounded(&err.to_string(), SHOWN_REASON_MAX).into_owned(),
            },
        };
        self.telemetry.emit(&Event::PluginChanged {
            file: key,
            change: &change,
        });
    }

    async fn load(&self, path: &Path) -> Result<Plugin, ReloadError> {
        let engine = self.engine.clone();
        let owned = path.to_owned();
        tokio::task::spawn_blocking(move || engine.load(&owned))
            .await
            .map_err(|err| ReloadError::Interrupted {
                path: path.to_owned(),
                reason: err.to_string(),
            })?
            .map_err(ReloadError::from)
    }

    async fn declare_queues(&self, path: &Path, plugin: &Plugin) -> Result<(), ReloadError> {
        let Some(declare) = &self.declare else {
            return Ok(());
        };
        for queue in &plugin.manifest().queues {
            match declare(queue.clone()).await {
                Ok(()) => {}
                Err(error) if error.is_permanent() => {
                    return Err(ReloadError::Broker {
                        path: path.to_owned(),
                        error,
                    });
                }
                Err(error) => {
                    warn!(queue = %queue.name, %error, "cannot declare the queue now; its consumer will once the broker answers");
                }
            }
        }
        Ok(())
    }

    fn install(&self, path: &Path, key: &str, plugin: Plugin) -> Result<Change, ReloadError> {
        let registry = self.plugins.current();
        let serving = registry.units().find(|u| u.key() == key).cloned();
        let previous = serving.as_ref().map(|u| u.version().to_owned());
        if previous.as_deref() == Some(plugin.version()) {
            return Ok(Change::Unchanged);
        }
        let rolled_back = self.rolled_back.lock().unwrap_or_else(|e| e.into_inner());
        if serving.is_some() && rolled_back.contains(plugin.version()) {
            info!(file = %path.display(), version = %plugin.version(), "this version was rolled back after its probation; the serving version stays until the file changes");
            return Ok(Change::Unchanged);
        }
        drop(rolled_back);
        let (name, version) = (plugin.name().to_owned(), plugin.version().to_owned());
        let identity = plugin.identity().clone();
        let manifest = plugin.manifest();
        let jobs: Vec<&str> = manifest.jobs.iter().map(|j| j.name.as_str()).collect();
        let queues: Vec<&str> = manifest.queues.iter().map(|q| q.name.as_str()).collect();
        let (jobs, queues) = (jobs.join(", "), queues.join(", "));
        let mut unit = Unit::from_plugin(key, plugin);
        if let Some(wrap) = &self.wrap {
            unit = unit.map_handler(|handler| wrap(handler));
        }
        let grants = self.engine.grants().current();
        let rules = grants.granted(&identity).and_then(|g| g.probation);
        let trial = serving.zip(rules).and_then(|(serving, rules)| {
            // Judged against the version that served alone, never against a trial.
            let incumbent = serving.incumbent().cloned().unwrap_or(serving);
            let same_jobs = job_types(incumbent.manifest()) == job_types(unit.manifest());
            if !same_jobs {
                warn!(plugin = %name, file = %path.display(), "the new version serves other job types than the old one: it replaces it without a probation");
            }
            same_jobs.then_some((incumbent, rules))
        });
        let mut on_trial = None;
        if let Some((incumbent, rules)) = trial {
            on_trial = Some((incumbent.version().to_owned(), rules.share));
            let (telemetry, rolled_back) = (self.telemetry.clone(), Arc::clone(&self.rolled_back));
            let report: Verdicts = Arc::new(move |file, change| {
                if let Change::RolledBack { new, .. } = &change {
                    let mut versions = rolled_back.lock().unwrap_or_else(|e| e.into_inner());
                    versions.insert(new.clone());
                }
                telemetry.emit(&Event::PluginChanged {
                    file,
                    change: &change,
                });
            });
            unit = on_probation(incumbent, unit, rules, self.plugins.clone(), report);
        }
        self.plugins
            .install(unit)
            .map_err(|conflict| ReloadError::Conflict {
                path: path.to_owned(),
                conflict,
            })?;
        warn_pin(&self.engine.grants().current(), key, &identity);
        let file = path.display();
        if let Some((old, share)) = on_trial {
            let share_percent = (share * 100.0).round() as u32;
            info!(plugin = %name, %old, new = %version, %file, share_percent, "plugin version on probation beside the old one");
            return Ok(Change::OnProbation {
                plugin: name,
                old,
                new: version,
                share_percent,
            });
        }
        Ok(match previous {
            Some(old) => {
                info!(plugin = %name, %old, new = %version, %file, %jobs, %queues, "plugin replaced");
                Change::Replaced {
                    plugin: name,
                    old,
                    new: version,
                }
            }
            None => {
                info!(plugin = %name, %version, %file, %jobs, %queues, "plugin loaded");
                Change::Loaded {
                    plugin: name,
                    version,
                }
            }
        })
    }
}

/// The job types a manifest serves, in order.
fn job_types(manifest: &crate::job::Manifest) -> Vec<&str> {
    let mut jobs: Vec<&str> = manifest.jobs.iter().map(|job| job.name.as_str()).collect();
    jobs.sort_unstable();
    jobs
}

/// Warn when the section of the plugin `id`, loaded from `file`, pins another binary.
fn warn_pin(grants: &Grants, file: &str, id: &Identity) {
    let Some(section) = grants.plugin(&id.name) else {
        return;
    };
    if section.pin(&id.sha256) == grants::Pin::Mismatch {
        warn!(
            file,
            expected = section.sha256.as_deref().unwrap_or_default(),
            actual = %id.sha256,
            grants = %grants.file().display(),
            "the plugin's sha256 is not the one its grants section pins: it runs without its grants until the pin is updated"
        );
    }
}

/// Because a unit is replaced by the next load of the same file, the key is the path.
fn key_of(path: &Path) -> String {
    path.display().to_string()
}

fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
}

/// Every `*.wasm` of `dir` but directories: a FIFO or a link to a device is refused by
/// its load, with a message, rather than passed over in silence.
fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_plugin_file(&path) && !path.is_dir() {
            files.push(path);
        }
    }
    Ok(files)
}
