//! What the operator grants each plugin beyond the sandbox: outbound HTTP to listed
//! origins, configuration values and secrets, from one file, `jobhost.toml`; the
//! concurrency caps and rate limits the operator sets on queues and job types there
//! ([`Caps`], [`Rates`]); and the fleet's schedules.
//!
//! # Contract
//! - Deny by default: no file, or no `[plugins.NAME]` section for a plugin, grants that
//!   plugin nothing.
//! - Identity is the operator's: NAME is the stem of the plugin's file in the plugin
//!   directory (`plugins/NAME.wasm` ↔ `[plugins.NAME]`), an [`Identity`] the host derives
//!   from the file, never the name the guest's manifest reports (that name only labels the
//!   plugin in logs, metrics and the admin API). A section may pin the binary's digest
//!   (`sha256 = "..."`): a binary whose digest differs runs without the section's grants
//!   ([`Grants::granted`], [`Pin::Mismatch`]) until the pin is updated.
//! - The file is the operator's: a regular file of at most [`FILE_MAX`] bytes, owned by the
//!   host's user and writable by no one else; anything else is refused before it is read
//!   (see [`crate::files`]). It is then checked whole ([`Grants::load`]); unknown keys,
//!   malformed origins, a key that is both a config value and a secret, a secret whose
//!   variable or file cannot be read or is one of the host's own credentials
//!   ([`HostSecrets`]): each is a [`GrantsError`] naming the file and the line, and the
//!   host keeps the grants it had.
//! - A request is checked against the plugin's grants ([`Grants::check`]) before anything
//!   leaves the host; a refusal ([`Refusal`]) names the origin, the plugin, and the line
//!   that would allow it; it names the grants file by its file name only
//!   ([`Grants::shown_file`]), never by a path, because refusals end up in dead letters.
//!   Loopback, private, link-local and unspecified addresses are
//!   reachable only through a grant that names the address itself or `localhost`
//!   ([`Match::Explicit`]); every address a name resolves to is checked
//!   ([`address::restricted`]).
//! - A plugin's request slots (`max_concurrent_requests`) are one set per plugin name for
//!   the life of the host ([`SharedGrants::replace`] resizes them), so jobs across a reload
//!   never get more than the limit between them. A section that sets no limit gets as many
//!   slots as the host runs jobs at once ([`SharedGrants::with_job_concurrency`]): a plugin
//!   is not throttled below the host's concurrency unless the operator says so, and its
//!   requests stay bounded.
//! - Secret values are [`Secret`]s: no `Debug`, `Display`, error or admin page shows them.
//! - `https://` requests trust the webpki roots and, host-wide, the CAs of
//!   `[outbound] ca_certificates` ([`OutboundTrust`]), read with the file.
//!
//! # The file
//! ```toml
//! [outbound]
//! ca_certificates = "certs/internal-ca.pem"   # PEM, relative to this file; optional
//!
//! [plugins.webhook]                # for plugins/webhook.wasm
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"  # optional
//! allowed_outbound_hosts = ["https://hooks.example.com", "http://127.0.0.1:7879"]
//! max_concurrent_requests = 4     # default: the host's job concurrency
//! max_response_bytes = 10485760   # default 10 MiB
//! request_timeout = "10s"         # default 30s; always cut to the job's deadline
//! [plugins.webhook.config]
//! endpoint = "http://127.0.0.1:7879/hook"
//! [plugins.webhook.secrets]
//! signing_key = { env = "WEBHOOK_SIGNING_KEY" }   # or { file = "secrets/webhook.key" }
//!
//! [queues."emails"]                # fleet-wide caps, see `caps`, and rate limits, `rates`
//! concurrency = 4
//! rate = "50/s"
//! [jobs."email.Send"]
//! concurrency = { key = "customer_id", limit = 2 }
//! rate = { key = "customer_id", limit = "10/s", burst = 5 }
//! [schedules."nightly-report"]    # a periodic job of the fleet (see `crate::schedule`)
//! job_type = "reports.Nightly"
//! cron = "0 3 * * *"              # or: every = "30s"
//! tz = "Europe/Paris"             # default UTC
//! payload = { kind = "daily" }    # default {}
//! missed = "skip"                 # or { catch_up = 3 }
//! ```
//!
//! Schedules ([`Schedule`]) are the fleet's, not a plugin's: they grant nothing, and live
//! here because the operator changes them without a rebuild, like the rest of this file.

pub mod address;
mod caps;
mod file;
mod origin;
mod probation;
mod rates;
mod schedule;
mod secret;
mod slots;
mod trust;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use jobhost_sdk::limits::{JobLimits, QueueLimits};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::job::Schedule;
use crate::text::{self, NAME_MAX};

pub use caps::{CapKey, Caps, KEY_NAME_MAX, KeyCap, MAX_CONCURRENCY, key_of};
pub use origin::{Match, OriginPattern, RequestOrigin, Scheme};
pub use probation::Probation;
pub use rates::{KeyRate, MAX_BURST, MAX_PER_SECOND, MAX_RATE_COUNT, Rate, RateUnit, Rates};
pub use secret::{HostSecrets, Secret, SecretSource};
pub use slots::{RequestPermit, RequestSlots};
pub use trust::{CA_FILE_MAX, OutboundTrust};

/// The name of the grants file: in the operator's configuration directory by default
/// (`jobhost run`), in the plugin directory for the demo.
pub const FILE_NAME: &str = "jobhost.toml";

/// The most bytes a grants file may hold; a long one holds a few hundred plugins in KiB.
pub const FILE_MAX: u64 = 1024 * 1024;

/// Requests a plugin may have in flight at once, unless its section says otherwise, where
/// the host's job concurrency is not known: the default concurrency of `jobhost run`. A
/// host's engine gives a section without a limit as many slots as it runs jobs at once
/// ([`SharedGrants::with_job_concurrency`]).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 63;

/// Bytes of one response body a plugin may read, unless its section says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 10 * 1024 * 1024;

/// How long one request may take, unless its section says otherwise; always cut to what
/// is left of the job's deadline.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a grants file was not taken; the grants in force stay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantsError {
    /// The file exists but cannot be read.
    #[error("cannot read `{}`: {cause}", file.display())]
    Read {
        /// The grants file.
        file: PathBuf,
        /// Why; in the message, so not also a `source()`.
        cause: std::io::Error,
    },
    /// The file is not a valid grants file.
    #[error("`{}` line {line}: {reason}", file.display())]
    Invalid {
        /// The grants file.
        file: PathBuf,
        /// The 1-based line of the offending entry.
        line: usize,
        /// What is wrong, never a secret's value.
        reason: String,
    },
}

/// Why an outbound request was refused before it left the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No grant of the plugin matches the origin.
    #[error(
        "outbound request to `{origin}` is not allowed for plugin `{plugin}`; to allow it add \
         \"{grant}\" to allowed_outbound_hosts under [plugins.{section}] in the grants file \
         {file}"
    )]
    NotGranted {
        /// The request's origin, bounded.
        origin: String,
        /// The plugin's name.
        plugin: String,
        /// The plugin's table key in the file.
        section: String,
        /// The grant that would allow it.
        grant: String,
        /// The grants file's name.
        file: String,
    },
    /// A wildcard or a name matched, but the host resolves to an address only an explicit
    /// grant may reach.
    #[error(
        "outbound request to `{origin}` is not allowed for plugin `{plugin}`: `{host}` \
         resolves to {address}, {kind}, which only a grant naming that address allows; to \
         allow it add \"{grant}\" to allowed_outbound_hosts under [plugins.{section}] in the \
         grants file {file}"
    )]
    Restricted {
        /// The request's origin, bounded.
        origin: String,
        /// The plugin's name.
        plugin: String,
        /// The plugin's table key in the file.
        section: String,
        /// The host as the request names it, bounded.
        host: String,
        /// The address it resolved to.
        address: std::net::IpAddr,
        /// What kind of address it is.
        kind: &'static str,
        /// The grant that would allow it.
        grant: String,
        /// The grants file's name.
        file: String,
    },
    /// The plugin's section pins another binary: it runs without its grants.
    #[error(
        "outbound request to `{origin}` is not allowed for plugin `{plugin}`: its binary's \
         sha256 is {actual}, not the one pinned under [plugins.{section}] in the grants file \
         {file}, so it runs without its grants until the pin is updated"
    )]
    PinMismatch {
        /// The request's origin, bounded.
        origin: String,
        /// The plugin's name.
        plugin: String,
        /// The plugin's table key in the file.
        section: String,
        /// The sha256 of the binary that made the request.
        actual: String,
        /// The grants file's name.
        file: String,
    },
}

/// A configuration value of a plugin, or a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A plain value from the plugin's `config` table.
    Config(String),
    /// A secret from the plugin's `secrets` table, read from where `source` says.
    Secret {
        /// The value, redacted in every output.
        value: Secret,
        /// Where it was read from.
        source: SecretSource,
    },
}

/// Who a plugin is to its grants: what the operator controls about it, derived by the
/// host from the plugin's file, never from what the guest reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The stem of its file in the plugin directory: `plugins/NAME.wasm` is granted what
    /// `[plugins.NAME]` says.
    pub name: Arc<str>,
    /// The sha256 of its binary, 64 lowercase hex digits, checked against the section's pin.
    pub sha256: Arc<str>,
}

impl Identity {
    /// The identity of the plugin file `file` whose bytes hash to `sha256`: the file's
    /// stem, or the whole path when it has none.
    pub fn of_file(file: &Path, sha256: impl Into<Arc<str>>) -> Self {
        let name = file
            .file_stem()
            .unwrap_or(file.as_os_str())
            .to_string_lossy()
            .into();
        Self {
            name,
            sha256: sha256.into(),
        }
    }
}

/// Whether a section's digest pin holds for a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pin {
    /// The section pins no digest: any binary at the file gets its grants.
    Unpinned,
    /// The binary's digest is the pinned one.
    Matches,
    /// The binary's digest is another: it runs without the section's grants.
    Mismatch,
}

/// What one plugin is granted.
#[derive(Debug)]
pub struct PluginGrants {
    /// The sha256 its binary must have, 64 lowercase hex digits; `None` pins nothing.
    pub sha256: Option<String>,
    /// Origins it may send requests to.
    pub allowed_outbound_hosts: Vec<OriginPattern>,
    /// Requests it may have in flight at once, across all its jobs: the section's
    /// `max_concurrent_requests`, else the host's job concurrency (see [`SharedGrants`]).
    pub max_concurrent_requests: usize,
    /// Whether the section sets `max_concurrent_requests`; if not, the limit follows the
    /// host's job concurrency.
    limit_set: bool,
    /// Bytes of one response body it may read; a longer body fails at the cap.
    pub max_response_bytes: u64,
    /// How long one request may take, at most what is left of the job's deadline.
    pub request_timeout: Duration,
    /// Config values and secrets, by key (one key space).
    pub values: BTreeMap<String, Value>,
    /// Permits for requests in flight, shared by all its jobs and kept across reloads.
    requests: Arc<RequestSlots>,
    /// How a new version of it is judged before it serves everything; none replaces a
    /// version at once.
    pub probation: Option<Probation>,
}

impl PluginGrants {
    /// The grants of a plugin with an empty section: nothing but the default limits.
    pub fn empty() -> Self {
        Self {
            sha256: None,
            allowed_outbound_hosts: Vec::new(),
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            limit_set: false,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            values: BTreeMap::new(),
            requests: RequestSlots::new(DEFAULT_MAX_CONCURRENT_REQUESTS),
            probation: None,
        }
    }

    /// The value of `key`, a config value or a secret, for the plugin that reads it.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|value| match value {
            Value::Config(value) => value.as_str(),
            Value::Secret { value, .. } => value.expose(),
        })
    }

    /// Whether `key` names a secret rather than a plain config value.
    pub fn is_secret(&self, key: &str) -> bool {
        matches!(self.values.get(key), Some(Value::Secret { .. }))
    }

    /// The permits of its requests in flight.
    pub fn requests(&self) -> &Arc<RequestSlots> {
        &self.requests
    }

    /// Whether the section's pin holds for a binary whose digest is `sha256`.
    pub fn pin(&self, sha256: &str) -> Pin {
        match &self.sha256 {
            None => Pin::Unpinned,
            Some(pinned) if pinned.eq_ignore_ascii_case(sha256) => Pin::Matches,
            Some(_) => Pin::Mismatch,
        }
    }

    /// The same grants with `limit` request slots, counted in `requests`.
    fn with_requests(&self, limit: usize, requests: Arc<RequestSlots>) -> Self {
        Self {
            sha256: self.sha256.clone(),
            allowed_outbound_hosts: self.allowed_outbound_hosts.clone(),
            max_concurrent_requests: limit,
            limit_set: self.limit_set,
            max_response_bytes: self.max_response_bytes,
            request_timeout: self.request_timeout,
            values: self.values.clone(),
            requests,
            probation: self.probation,
        }
    }
}

/// The whole grants file: every plugin's grants, and where they came from.
#[derive(Debug)]
pub struct Grants {
    file: PathBuf,
    plugins: BTreeMap<String, Arc<PluginGrants>>,
    outbound: OutboundTrust,
    caps: Caps,
    rates: Rates,
    /// The queues the file pauses (`paused = true`).
    paused: BTreeSet<String>,
    /// The queues whose failed attempts are not recorded (`record = false`).
    unrecorded: BTreeSet<String>,
    /// The share of each queue's completed attempts that keep their recording.
    sampled: BTreeMap<String, f64>,
    schedules: BTreeMap<String, Arc<Schedule>>,
}

impl Grants {
    /// No grants at all, as when `file` does not exist.
    pub fn none(file: impl Into<PathBuf>) -> Self {
        Self {
            file: file.into(),
            plugins: BTreeMap::new(),
            outbound: OutboundTrust::default(),
            caps: Caps::default(),
            rates: Rates::default(),
            paused: BTreeSet::new(),
            unrecorded: BTreeSet::new(),
            sampled: BTreeMap::new(),
            schedules: BTreeMap::new(),
        }
    }

    /// Read `file`; a missing file grants nothing. Secrets are read now, from the
    /// environment and from files relative to `file`'s directory, never from
    /// `host_secrets`. Blocking (see [`crate::files`]).
    pub fn load(file: &Path, host_secrets: &HostSecrets) -> Result<Self, GrantsError> {
        let rules = crate::files::Rules::capped(FILE_MAX, "a grants file may hold").operator_only();
        match crate::files::read_text(file, &rules) {
            Ok(text) => file::parse(file, &text, host_secrets),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::none(file)),
            Err(cause) => Err(GrantsError::Read {
                file: file.to_owned(),
                cause,
            }),
        }
    }

    /// Parse `text` as the contents of `file`, refusing no secret source (an embedder's
    /// grants, a test's); [`Grants::load`] refuses the host's own credentials.
    pub fn parse(file: &Path, text: &str) -> Result<Self, GrantsError> {
        file::parse(file, text, &HostSecrets::default())
    }

    /// The file these grants were read from (or would be).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The plugins the file has a section for, and their grants, by name.
    pub fn plugins(&self) -> impl Iterator<Item = (&str, &Arc<PluginGrants>)> {
        self.plugins
            .iter()
            .map(|(name, grants)| (name.as_str(), grants))
    }

    /// The concurrency caps of the `[queues]` and `[jobs]` sections.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The rate limits of the `[queues]` and `[jobs]` sections.
    pub fn rates(&self) -> &Rates {
        &self.rates
    }

    /// The concurrency cap of `queue` in force: the file's, else what its plugin declares
    /// (`declared`), with where it is set.
    pub fn queue_concurrency(
        &self,
        queue: &str,
        declared: &QueueLimits,
    ) -> Option<(u32, LimitSource)> {
        in_force(self.caps.queue(queue), declared.concurrency)
    }

    /// The rate limit of `queue` in force: the file's, else its plugin's.
    pub fn queue_rate(&self, queue: &str, declared: &QueueLimits) -> Option<(Rate, LimitSource)> {
        in_force(self.rates.queue(queue), declared.rate)
    }

    /// The per-key cap of `job_type` in force: the file's, else its plugin's.
    pub fn job_concurrency<'a>(
        &'a self,
        job_type: &str,
        declared: &'a JobLimits,
    ) -> Option<(&'a KeyCap, LimitSource)> {
        in_force(self.caps.job(job_type), declared.concurrency.as_ref())
    }

    /// The per-key rate limit of `job_type` in force: the file's, else its plugin's.
    pub fn job_rate<'a>(
        &'a self,
        job_type: &str,
        declared: &'a JobLimits,
    ) -> Option<(&'a KeyRate, LimitSource)> {
        in_force(self.rates.job(job_type), declared.rate.as_ref())
    }

    /// The queues the file pauses (`[queues."NAME"] paused = true`): no host that reads this
    /// file consumes them, whatever `jobhost queue resume` says, until the file stops saying
    /// so (see docs/flow-control.md, "Pause and resume").
    pub fn paused(&self) -> &BTreeSet<String> {
        &self.paused
    }

    /// Whether the failed attempts of `queue` are recorded for replay: unless the file
    /// says `[queues."NAME"] record = false` (docs/replay.md).
    pub fn records(&self, queue: &str) -> bool {
        !self.unrecorded.contains(queue)
    }

    /// The share of `queue`'s completed attempts that keep their recording too (`[queues."NAME"]
    /// record_completed = 0.01`), 0 to 1; 0 unless the file says so.
    pub fn completed_sampled(&self, queue: &str) -> f64 {
        self.sampled.get(queue).copied().unwrap_or(0.0)
    }

    /// The operator's schedules (`[schedules."NAME"]`), by name, disabled ones included.
    pub fn schedules(&self) -> impl Iterator<Item = (&str, &Arc<Schedule>)> {
        self.schedules
            .iter()
            .map(|(name, schedule)| (name.as_str(), schedule))
    }

    /// What `https://` requests of every plugin trust.
    pub fn outbound(&self) -> &OutboundTrust {
        &self.outbound
    }

    /// The section named `plugin`, if the file has one, whatever its pin says: what the
    /// admin views show. Jobs take [`Grants::granted`].
    pub fn plugin(&self, plugin: &str) -> Option<&Arc<PluginGrants>> {
        self.plugins.get(plugin)
    }

    /// What the plugin `id` is granted: its section, unless the section pins another
    /// binary.
    pub fn granted(&self, id: &Identity) -> Option<&Arc<PluginGrants>> {
        self.plugin(&id.name)
            .filter(|grants| grants.pin(&id.sha256) != Pin::Mismatch)
    }

    /// The grants file as refusals name it: its file name alone, because refusals end up
    /// in dead letters, which should not tell where the host keeps its files.
    pub fn shown_file(&self) -> String {
        self.file
            .file_name()
            .unwrap_or(self.file.as_os_str())
            .to_string_lossy()
            .into_owned()
    }

    /// Whether the plugin `id` may send a request to `origin`, and how the grant matched.
    pub fn check(&self, id: &Identity, origin: &RequestOrigin) -> Result<Match, Box<Refusal>> {
        let plugin = &*id.name;
        let shown_origin = || text::bounded(&origin.to_string(), NAME_MAX).into_owned();
        if self
            .plugin(plugin)
            .is_some_and(|grants| grants.pin(&id.sha256) == Pin::Mismatch)
        {
            return Err(Box::new(Refusal::PinMismatch {
                origin: shown_origin(),
                plugin: plugin.to_owned(),
                section: section(plugin),
                actual: id.sha256.to_string(),
                file: self.shown_file(),
            }));
        }
        let matched = self.granted(id).and_then(|grants| {
            grants
                .allowed_outbound_hosts
                .iter()
                .filter_map(|grant| grant.matches(origin))
                .max_by_key(|matched| *matched == Match::Explicit)
        });
        matched.ok_or_else(|| {
            Box::new(Refusal::NotGranted {
                origin: shown_origin(),
                plugin: plugin.to_owned(),
                section: section(plugin),
                grant: text::bounded(&origin.suggested_grant(), NAME_MAX).into_owned(),
                file: self.shown_file(),
            })
        })
    }

    /// The refusal of a request that matched a wildcard or a name whose `host` resolved to
    /// `address`, of restricted `kind`.
    pub fn restricted(
        &self,
        plugin: &str,
        origin: &RequestOrigin,
        address: std::net::IpAddr,
        kind: &'static str,
    ) -> Refusal {
        let explicit = RequestOrigin {
            host: address.to_string(),
            ..origin.clone()
        };
        Refusal::Restricted {
            origin: text::bounded(&origin.to_string(), NAME_MAX).into_owned(),
            plugin: plugin.to_owned(),
            section: section(plugin),
            host: text::bounded(&origin.host, NAME_MAX).into_owned(),
            address,
            kind,
            grant: explicit.suggested_grant(),
            file: self.shown_file(),
        }
    }
}

/// `plugin` as a key of a TOML table header: bare when it can be, quoted otherwise.
fn section(plugin: &str) -> String {
    let bare = !plugin.is_empty()
        && plugin
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        plugin.to_owned()
    } else {
        format!("{plugin:?}")
    }
}

/// The grants in force, shared by the engine (each job reads them when it starts) and the
/// reload (which replaces them), with each plugin's request slots. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedGrants(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    current: RwLock<Arc<Grants>>,
    /// The request slots of a section that sets no `max_concurrent_requests`: the jobs the
    /// host runs at once.
    default_requests: usize,
    /// The request slots of every section name ever in force: a section that comes back
    /// after a reload without it finds the requests its jobs still have in flight.
    slots: Mutex<BTreeMap<String, Arc<RequestSlots>>>,
    /// Counts replacements, for whoever must act when the grants change.
    replaced: tokio::sync::watch::Sender<u64>,
}

impl SharedGrants {
    /// Start with `grants`, for a host that runs [`DEFAULT_MAX_CONCURRENT_REQUESTS`] jobs
    /// at once.
    pub fn new(grants: Grants) -> Self {
        Self::with_job_concurrency(grants, DEFAULT_MAX_CONCURRENT_REQUESTS)
    }

    /// Start with `grants`, for a host that runs `jobs` jobs at once (at least 1): a
    /// section that sets no `max_concurrent_requests` gets `jobs` request slots, so its
    /// plugin is never throttled below the host's concurrency unless the operator says so,
    /// and a hostile one has no more requests in flight than the host has jobs.
    pub fn with_job_concurrency(grants: Grants, jobs: usize) -> Self {
        let shared = Self(Arc::new(Shared {
            current: RwLock::new(Arc::new(Grants::none(grants.file.clone()))),
            default_requests: jobs.clamp(1, Semaphore::MAX_PERMITS),
            slots: Mutex::new(BTreeMap::new()),
            replaced: tokio::sync::watch::Sender::new(0),
        }));
        shared.replace(grants);
        shared
    }

    /// The grants in force now.
    pub fn current(&self) -> Arc<Grants> {
        Arc::clone(
            &self
                .0
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Put `grants` in force for the jobs that start from now on. Each plugin keeps its
    /// request slots, resized to the new `max_concurrent_requests` (the host's job
    /// concurrency where the section sets none).
    pub fn replace(&self, mut grants: Grants) {
        let mut slots = self.0.slots.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, plugin) in &mut grants.plugins {
            let limit = if plugin.limit_set {
                plugin.max_concurrent_requests
            } else {
                self.0.default_requests
            };
            let kept = slots
                .entry(name.clone())
                .or_insert_with(|| Arc::clone(plugin.requests()));
            if !Arc::ptr_eq(kept, plugin.requests()) || limit != plugin.max_concurrent_requests {
                kept.resize(limit);
                *plugin = Arc::new(plugin.with_requests(limit, Arc::clone(kept)));
            }
        }
        *self
            .0
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(grants);
        drop(slots);
        self.0.replaced.send_modify(|count| *count += 1);
    }

    /// A receiver that sees each replacement of the grants in force from now on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.replaced.subscribe()
    }
}

/// Where a concurrency cap or rate limit in force is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// The operator's grants file, which overrides the plugin.
    File,
    /// The plugin's declaration (`#[queue(...)]`, `#[job(...)]`).
    Plugin,
}

/// The file's limit when it sets one, else the plugin's.
fn in_force<T>(file: Option<T>, declared: Option<T>) -> Option<(T, LimitSource)> {
    file.map(|limit| (limit, LimitSource::File))
        .or_else(|| declared.map(|limit| (limit, LimitSource::Plugin)))
}

impl Default for SharedGrants {
    fn default() -> Self {
        Self::new(Grants::none(FILE_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest of every test binary.
    const SHA256: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn origin(scheme: &str, host: &str, port: u16) -> RequestOrigin {
        RequestOrigin::new(scheme, host, Some(port)).expect("http(s)")
    }

    /// The plugin at `plugins/NAME.wasm`, whose binary hashes to [`SHA256`].
    fn id(name: &str) -> Identity {
        Identity::of_file(Path::new(&format!("plugins/{name}.wasm")), SHA256)
    }

    #[test]
    fn a_request_no_grant_matches_is_refused_naming_the_line_that_would_allow_it() {
        let grants = Grants::parse(
            Path::new("plugins/jobhost.toml"),
            "[plugins.webhook]\nallowed_outbound_hosts = [\"https://hooks.example.com\"]\n",
        )
        .expect("valid");
        let refusal = grants
            .check(&id("webhook"), &origin("https", "evil.example", 443))
            .expect_err("not granted");
        assert_eq!(
            refusal.to_string(),
            "outbound request to `https://evil.example:443` is not allowed for plugin \
             `webhook`; to allow it add \"https://evil.example\" to allowed_outbound_hosts \
             under [plugins.webhook] in the grants file jobhost.toml"
        );
        assert!(
            grants
                .check(&id("webhook"), &origin("https", "hooks.example.com", 443))
                .is_ok()
        );
    }

    #[test]
    fn a_plugin_without_a_section_is_granted_nothing() {
        let grants = Grants::none("jobhost.toml");
        let refusal = grants
            .check(&id("my.plugin"), &origin("http", "127.0.0.1", 8080))
            .expect_err("deny by default");
        assert!(
            refusal
                .to_string()
                .contains("add \"http://127.0.0.1:8080\" to allowed_outbound_hosts under [plugins.\"my.plugin\"]"),
            "{refusal}"
        );
    }

    #[test]
    fn an_explicit_grant_wins_over_a_wildcard_for_the_same_origin() {
        let grants = Grants::parse(
            Path::new("jobhost.toml"),
            "[plugins.p]\nallowed_outbound_hosts = [\"http://*:8080\", \"http://127.0.0.1:8080\"]\n",
        )
        .expect("valid");
        assert_eq!(
            grants.check(&id("p"), &origin("http", "127.0.0.1", 8080)),
            Ok(Match::Explicit)
        );
        assert_eq!(
            grants.check(&id("p"), &origin("http", "localhost", 8080)),
            Ok(Match::PublicOnly)
        );
    }

    #[test]
    fn a_restricted_refusal_suggests_granting_the_address_itself() {
        let grants = Grants::none("jobhost.toml");
        let refusal = grants.restricted(
            "p",
            &origin("http", "localhost", 8080),
            "127.0.0.1".parse().expect("an address"),
            "a loopback address",
        );
        assert_eq!(
            refusal.to_string(),
            "outbound request to `http://localhost:8080` is not allowed for plugin `p`: \
             `localhost` resolves to 127.0.0.1, a loopback address, which only a grant naming \
             that address allows; to allow it add \"http://127.0.0.1:8080\" to \
             allowed_outbound_hosts under [plugins.p] in the grants file jobhost.toml"
        );
    }

    #[test]
    fn a_refusal_names_the_grants_file_by_its_name_not_where_it_lives() {
        let grants = Grants::none("/etc/secret-place/jobhost/grants.toml");
        let refusal = grants
            .check(&id("p"), &origin("https", "x.example", 443))
            .expect_err("deny by default")
            .to_string();
        assert!(
            refusal.ends_with("in the grants file grants.toml"),
            "{refusal}"
        );
        assert!(!refusal.contains("secret-place"), "{refusal}");
    }

    #[test]
    fn a_plugin_is_granted_its_files_section_and_only_while_its_pin_holds() {
        let text = |pin: &str| {
            format!(
                "[plugins.innocent]\n{pin}allowed_outbound_hosts = [\"https://ok.example\"]\n\
                 [plugins.innocent.config]\nmine = \"ours\"\n"
            )
        };
        let ok = origin("https", "ok.example", 443);
        let unpinned = Grants::parse(Path::new("jobhost.toml"), &text("")).expect("valid");
        let innocent = id("innocent");
        assert_eq!(
            unpinned.granted(&innocent).and_then(|g| g.value("mine")),
            Some("ours")
        );
        assert_eq!(
            unpinned.plugin("innocent").map(|g| g.pin(SHA256)),
            Some(Pin::Unpinned)
        );
        assert!(unpinned.check(&innocent, &ok).is_ok());
        assert!(
            unpinned.granted(&id("someone-else")).is_none(),
            "another file's stem is another plugin"
        );

        let pinned = Grants::parse(
            Path::new("jobhost.toml"),
            &text(&format!("sha256 = \"{}\"\n", SHA256.to_uppercase())),
        )
        .expect("valid");
        assert!(pinned.granted(&innocent).is_some(), "the pin is case-blind");
        assert_eq!(
            pinned.plugin("innocent").map(|g| g.pin(SHA256)),
            Some(Pin::Matches)
        );

        let changed = Identity::of_file(Path::new("plugins/innocent.wasm"), "0".repeat(64));
        assert!(
            pinned.granted(&changed).is_none(),
            "another binary gets nothing"
        );
        let refusal = pinned
            .check(&changed, &ok)
            .expect_err("pin mismatch")
            .to_string();
        assert!(
            refusal.contains(&format!(
                "its binary's sha256 is {}, not the one pinned under [plugins.innocent]",
                "0".repeat(64)
            )),
            "{refusal}"
        );
    }

    #[test]
    fn a_section_without_a_request_limit_gets_a_slot_per_job_of_the_host() {
        let parse = |text: &str| Grants::parse(Path::new("jobhost.toml"), text).expect("valid");
        let shared = SharedGrants::with_job_concurrency(parse("[plugins.p]\n"), 1000);
        let limit = |shared: &SharedGrants| {
            let current = shared.current();
            let grants = current.plugin("p").expect("a section");
            (grants.max_concurrent_requests, grants.requests().limit())
        };
        assert_eq!(limit(&shared), (1000, 1000), "the host's concurrency");
        shared.replace(parse("[plugins.p]\nmax_concurrent_requests = 4\n"));
        assert_eq!(limit(&shared), (4, 4), "the operator's limit");
        shared.replace(parse("[plugins.p]\n"));
        assert_eq!(limit(&shared), (1000, 1000), "the host's concurrency again");
    }

    #[tokio::test]
    async fn request_slots_stay_one_set_across_reloads_and_follow_the_limit() {
        let text = |limit: usize| format!("[plugins.p]\nmax_concurrent_requests = {limit}\n");
        let parse = |limit| Grants::parse(Path::new("jobhost.toml"), &text(limit)).expect("valid");
        let shared = SharedGrants::new(parse(2));
        let slots = |shared: &SharedGrants| {
            Arc::clone(shared.current().plugin("p").expect("a section").requests())
        };
        let before = slots(&shared);
        let in_flight = (before.acquire().await, before.acquire().await);
        shared.replace(parse(2));
        let after = slots(&shared);
        assert_eq!(
            after.available(),
            0,
            "the jobs after the reload wait for the requests in flight before it"
        );
        shared.replace(Grants::none("jobhost.toml"));
        shared.replace(parse(3));
        assert_eq!(
            slots(&shared).available(),
            1,
            "a section that comes back keeps its slots"
        );
        shared.replace(parse(1));
        drop(in_flight);
        assert_eq!(slots(&shared).available(), 1, "the limit shrank to 1");
        assert!(Arc::ptr_eq(&before, &slots(&shared)));
    }
}
