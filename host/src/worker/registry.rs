//! Which handler serves each job type, as an immutable snapshot swapped on every change.
//!
//! Each delivery reads the snapshot current when it starts, so a job already running
//! finishes on the version it started with while the next delivery sees the new one.
//!
//! A unit is identified by its key (a plugin's file); its manifest's name labels it in
//! logs and admin views, so no two loaded units may share one: a second unit claiming a
//! loaded unit's name is refused ([`RegistryError::NameClaimed`]), and the first keeps
//! serving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use jobhost_sdk::limits::{JobLimits, QueueLimits};
use jobhost_sdk::{QueueConfig, RetryPolicy};
use tokio::sync::watch;

use super::Handler;
use crate::grants::Identity;
use crate::job::{JobSpec, Manifest};
use crate::plugin::Plugin;
use crate::policy::effective_policy;

/// One loaded handler set: a plugin version, or a native handler in tests and benchmarks.
#[derive(Clone)]
pub struct Unit {
    key: String,
    identity: Option<Identity>,
    version: String,
    manifest: Arc<Manifest>,
    handler: Arc<dyn Handler>,
    /// When the unit is a new version on probation: the trial's id, and the version it is
    /// judged against.
    trial: Option<(u64, Box<Unit>)>,
}

impl fmt::Debug for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unit")
            .field("key", &self.key)
            .field("name", &self.manifest.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Unit {
    /// A unit identified by `key` (a plugin's file path): loading another unit with the same
    /// key replaces this one.
    pub fn new(
        key: impl Into<String>,
        version: impl Into<String>,
        manifest: Manifest,
        handler: Arc<dyn Handler>,
    ) -> Self {
        Self {
            key: key.into(),
            identity: None,
            version: version.into(),
            manifest: Arc::new(manifest),
            handler,
            trial: None,
        }
    }

    /// A plugin version loaded from the file `key` names.
    pub fn from_plugin(key: impl Into<String>, plugin: Plugin) -> Self {
        let version = plugin.version().to_owned();
        let manifest = plugin.manifest().clone();
        let identity = plugin.identity().clone();
        Self {
            identity: Some(identity),
            ..Self::new(key, version, manifest, Arc::new(plugin))
        }
    }

    /// Who the unit is to the grants file, when it is a plugin loaded from a file (see
    /// [`crate::grants`]); `None` for a native handler, which no grant reaches.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// What identifies the unit across reloads.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// The version (a content hash for plugins).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The queues and jobs it serves.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The same unit with its handler wrapped, e.g. to record invocations in tests.
    pub fn map_handler(self, wrap: impl FnOnce(Arc<dyn Handler>) -> Arc<dyn Handler>) -> Self {
        Self {
            handler: wrap(self.handler),
            ..self
        }
    }

    /// This unit's handler.
    pub(super) fn handler(&self) -> &Arc<dyn Handler> {
        &self.handler
    }

    /// The version a unit on probation is judged against; none when the unit serves alone.
    pub fn incumbent(&self) -> Option<&Unit> {
        self.trial.as_ref().map(|(_, incumbent)| &**incumbent)
    }

    /// `self`, a new version, on trial `id` against `incumbent`: `handler` shares the
    /// deliveries out between them, under the incumbent's manifest (its queues and
    /// policies) so that what the fleet declares does not change until a verdict.
    pub(super) fn on_trial(self, id: u64, incumbent: Unit, handler: Arc<dyn Handler>) -> Self {
        Self {
            manifest: Arc::clone(&incumbent.manifest),
            handler,
            trial: Some((id, Box::new(incumbent))),
            ..self
        }
    }

    fn label(&self) -> String {
        format!("`{}` ({})", self.manifest.name, self.key)
    }
}

/// Everything needed to run one job type: its handler, its declaration and its queue.
#[derive(Clone)]
pub struct Route {
    /// The handler of the unit that serves the job type.
    pub handler: Arc<dyn Handler>,
    /// The job type's declaration.
    pub job: JobSpec,
    /// The job's queue.
    pub queue: QueueConfig,
    /// The job type's name (`job.name`), shared, because every delivery labels its
    /// metrics with it.
    pub job_type: Arc<str>,
    /// The serving plugin's name and version, as the admin API reports it.
    pub plugin: Arc<str>,
    /// The limits the plugin declares on the job's queue, which the grants file overrides.
    pub queue_limits: QueueLimits,
    /// The limits the plugin declares per key of the job type, which the grants file
    /// overrides.
    pub job_limits: JobLimits,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("job", &self.job)
            .field("queue", &self.queue.name)
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// The policy that decides this job's failures now.
    pub fn policy(&self) -> &RetryPolicy {
        effective_policy(&self.job, &self.queue)
    }
}

/// Why a unit was refused; the registry is left as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two units from different files claim one plugin name.
    #[error(
        "plugin {new} claims the name of plugin {existing}, which is loaded; a plugin's name \
         is unique among loaded plugins, so rename one of them"
    )]
    NameClaimed {
        /// The unit being loaded.
        new: String,
        /// The unit loaded under that name.
        existing: String,
    },
    /// Two units claim one job type.
    #[error("plugin {new} claims job type `{job}`, already served by plugin {existing}")]
    JobClaimed {
        /// The job type.
        job: String,
        /// The unit being loaded.
        new: String,
        /// The unit that serves it.
        existing: String,
    },
    /// Two units declare one queue with different settings.
    #[error("plugin {new} declares queue `{queue}` differently from plugin {existing}")]
    QueueMismatch {
        /// The queue.
        queue: String,
        /// The unit being loaded.
        new: String,
        /// The unit whose declaration stands.
        existing: String,
    },
    /// A job names a queue its unit does not declare.
    #[error("plugin {unit}: job `{job}` names queue `{queue}`, which the plugin does not declare")]
    UndeclaredQueue {
        /// The unit.
        unit: String,
        /// The job type.
        job: String,
        /// The queue it names.
        queue: String,
    },
}

/// An immutable view of what is loaded.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    units: BTreeMap<String, Unit>,
    routes: HashMap<String, Arc<Route>>,
    queues: BTreeMap<String, QueueConfig>,
}

impl Registry {
    /// The route of `job_type`, if a loaded unit serves it.
    pub fn route(&self, job_type: &str) -> Option<&Arc<Route>> {
        self.routes.get(job_type)
    }

    /// The route of every job type a loaded unit serves.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.values().map(|route| &**route)
    }

    /// The queues of every loaded unit.
    pub fn queues(&self) -> impl Iterator<Item = &QueueConfig> {
        self.queues.values()
    }

    /// The loaded units, by key.
    pub fn units(&self) -> impl Iterator<Item = &Unit> {
        self.units.values()
    }

    /// This registry with `unit` added, replacing any unit with the same key.
    pub fn with(&self, unit: Unit) -> Result<Self, RegistryError> {
        let mut units = self.units.clone();
        units.remove(unit.key());
        check_claims(&units, &unit)?;
        units.insert(unit.key().to_owned(), unit);
        Ok(Self::build(units))
    }

    /// This registry without the unit loaded under `key`.
    pub fn without(&self, key: &str) -> Self {
        let mut units = self.units.clone();
        units.remove(key);
        Self::build(units)
    }

    fn build(units: BTreeMap<String, Unit>) -> Self {
        let mut routes = HashMap::new();
        let mut queues = BTreeMap::new();
        for unit in units.values() {
            let declared: HashMap<&str, &QueueConfig> = unit
                .manifest
                .queues
                .iter()
                .map(|q| (q.name.as_str(), q))
                .collect();
            for queue in &unit.manifest.queues {
                queues
                    .entry(queue.name.clone())
                    .or_insert_with(|| queue.clone());
            }
            let plugin: Arc<str> = format!("{}@{}", unit.name(), unit.version).into();
            for job in &unit.manifest.jobs {
                let queue = declared[job.queue.as_str()].clone();
                let declared = &unit.manifest.limits;
                let route = Route {
                    handler: unit.handler.clone(),
                    job: job.clone(),
                    job_type: job.name.as_str().into(),
                    plugin: plugin.clone(),
                    queue_limits: declared
                        .queues
                        .get(&queue.name)
                        .cloned()
                        .unwrap_or_default(),
                    job_limits: declared.jobs.get(&job.name).cloned().unwrap_or_default(),
                    queue,
                };
                routes.insert(job.name.clone(), Arc::new(route));
            }
        }
        Self {
            units,
            routes,
            queues,
        }
    }
}

fn check_claims(others: &BTreeMap<String, Unit>, unit: &Unit) -> Result<(), RegistryError> {
    let declared: BTreeSet<&str> = unit
        .manifest
        .queues
        .iter()
        .map(|q| q.name.as_str())
        .collect();
    for job in &unit.manifest.jobs {
        if !declared.contains(job.queue.as_str()) {
            return Err(RegistryError::UndeclaredQueue {
                unit: unit.label(),
                job: job.name.clone(),
                queue: job.queue.clone(),
            });
        }
    }
    if let Some(other) = others.values().find(|other| other.name() == unit.name()) {
        return Err(RegistryError::NameClaimed {
            new: unit.label(),
            existing: other.label(),
        });
    }
    for other in others.values() {
        if let Some(job) = other
            .manifest
            .jobs
            .iter()
            .find(|j| unit.manifest.jobs.iter().any(|n| n.name == j.name))
        {
            return Err(RegistryError::JobClaimed {
                job: job.name.clone(),
                new: unit.label(),
                existing: other.label(),
            });
        }
        for queue in &unit.manifest.queues {
            // The limits a plugin declares for a queue are part of its declaration: two
            // plugins with different ones would each limit their own jobs of one queue.
            let limits = |manifest: &Manifest| manifest.limits.queues.get(&queue.name).cloned();
            if other.manifest.queues.iter().any(|q| {
                q.name == queue.name
                    && (q != queue || limits(&other.manifest) != limits(&unit.manifest))
            }) {
                return Err(RegistryError::QueueMismatch {
                    queue: queue.name.clone(),
                    new: unit.label(),
                    existing: other.label(),
                });
            }
        }
    }
    Ok(())
}

/// The live registry: loads and removals swap the snapshot the worker reads.
#[derive(Debug, Clone)]
pub struct Plugins {
    current: Arc<watch::Sender<Arc<Registry>>>,
}

impl Default for Plugins {
    fn default() -> Self {
        Self {
            current: Arc::new(watch::Sender::new(Arc::new(Registry::default()))),
        }
    }
}

impl Plugins {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The snapshot in force now.
    pub fn current(&self) -> Arc<Registry> {
        self.current.borrow().clone()
    }

    /// Load `unit`, replacing the unit with the same key; refused on a conflict, in which
    /// case what was loaded keeps serving.
    pub fn install(&self, unit: Unit) -> Result<(), RegistryError> {
        let mut outcome = Ok(());
        self.current
            .send_if_modified(|registry| match registry.with(unit) {
                Ok(next) => {
                    *registry = Arc::new(next);
                    true
                }
                Err(conflict) => {
                    outcome = Err(conflict);
                    false
                }
            });
        outcome
    }

    /// Install `unit` in place of trial `trial` of its key, unless something else has
    /// replaced that trial since; returns whether it did.
    pub(super) fn end_trial(&self, trial: u64, unit: Unit) -> bool {
        let key = unit.key.clone();
        let mut installed = false;
        self.current.send_if_modified(|registry| {
            let on_this_trial = (registry.units.get(&key))
                .and_then(|unit| unit.trial.as_ref())
                .is_some_and(|(id, _)| *id == trial);
            if !on_this_trial {
                return false;
            }
            if let Ok(next) = registry.with(unit) {
                *registry = Arc::new(next);
                installed = true;
            }
            installed
        });
        installed
    }

    /// Unload the unit loaded under `key`, if any; returns whether one was.
    pub fn remove(&self, key: &str) -> bool {
        self.current.send_if_modified(|registry| {
            let loaded = registry.units.contains_key(key);
            if loaded {
                *registry = Arc::new(registry.without(key));
            }
            loaded
        })
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Registry>> {
        self.current.subscribe()
    }
}
