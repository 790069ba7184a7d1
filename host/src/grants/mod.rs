//! What the operator grants each plugin beyond the sandbox: outbound HTTP to listed
//! origins, configuration values and secrets, from one file, `jobhost.toml`.
//!
//! # Contract
//! - Deny by default: no file, or no `[plugins.NAME]` section for a plugin, grants that
//!   plugin nothing. NAME is the plugin's name from its manifest, as `jobhost plugins`
//!   shows it.
//! - The file is read whole and checked whole ([`Grants::load`]); unknown keys, malformed
//!   origins, a key that is both a config value and a secret, a secret whose variable or
//!   file cannot be read: each is a [`GrantsError`] naming the file and the line, and the
//!   host keeps the grants it had.
//! - A request is checked against the plugin's grants ([`Grants::check`]) before anything
//!   leaves the host; a refusal ([`Refusal`]) names the origin, the plugin, and the line
//!   that would allow it. Loopback, private, link-local and unspecified addresses are
//!   reachable only through a grant that names the address itself or `localhost`
//!   ([`Match::Explicit`]); every address a name resolves to is checked
//!   ([`address::restricted`]).
//! - Secret values are [`Secret`]s: no `Debug`, `Display`, error or admin page shows them.
//! - `https://` requests trust the webpki roots and, host-wide, the CAs of
//!   `[outbound] ca_certificates` ([`OutboundTrust`]), read with the file.
//!
//! # The file
//! ```toml
//! [outbound]
//! ca_certificates = "certs/internal-ca.pem"   # PEM, relative to this file; optional
//!
//! [plugins.webhook]
//! allowed_outbound_hosts = ["https://hooks.example.com", "http://127.0.0.1:7879"]
//! max_concurrent_requests = 4     # default 4
//! max_response_bytes = 10485760   # default 10 MiB
//! request_timeout = "10s"         # default 30s; always cut to the job's deadline
//! [plugins.webhook.config]
//! endpoint = "http://127.0.0.1:7879/hook"
//! [plugins.webhook.secrets]
//! signing_key = { env = "WEBHOOK_SIGNING_KEY" }   # or { file = "secrets/webhook.key" }
//! ```

pub mod address;
mod file;
mod origin;
mod secret;
mod trust;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::text::{self, NAME_MAX};

pub use origin::{Match, OriginPattern, RequestOrigin, Scheme};
pub use secret::{Secret, SecretSource};
pub use trust::{CA_FILE_MAX, OutboundTrust};

/// The name of the grants file in the plugin directory.
pub const FILE_NAME: &str = "jobhost.toml";

/// Requests a plugin may have in flight at once, unless its section says otherwise.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 4;

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
         \"{grant}\" to allowed_outbound_hosts under [plugins.{section}] in {file}"
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
        /// The grants file.
        file: String,
    },
    /// A wildcard or a name matched, but the host resolves to an address only an explicit
    /// grant may reach.
    #[error(
        "outbound request to `{origin}` is not allowed for plugin `{plugin}`: `{host}` \
         resolves to {address}, {kind}, which only a grant naming that address allows; to \
         allow it add \"{grant}\" to allowed_outbound_hosts under [plugins.{section}] in {file}"
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
        /// The grants file.
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

/// What one plugin is granted.
#[derive(Debug)]
pub struct PluginGrants {
    /// Origins it may send requests to.
    pub allowed_outbound_hosts: Vec<OriginPattern>,
    /// Requests it may have in flight at once, across all its jobs.
    pub max_concurrent_requests: usize,
    /// Bytes of one response body it may read; a longer body fails at the cap.
    pub max_response_bytes: u64,
    /// How long one request may take, at most what is left of the job's deadline.
    pub request_timeout: Duration,
    /// Config values and secrets, by key (one key space).
    pub values: BTreeMap<String, Value>,
    /// Permits for requests in flight, shared by all its jobs.
    requests: Arc<Semaphore>,
}

impl PluginGrants {
    /// The grants of a plugin with an empty section: nothing but the default limits.
    pub fn empty() -> Self {
        Self {
            allowed_outbound_hosts: Vec::new(),
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            values: BTreeMap::new(),
            requests: Arc::new(Semaphore::new(DEFAULT_MAX_CONCURRENT_REQUESTS)),
        }
    }

    /// The value of `key`, a config value or a secret, for the plugin that reads it.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|value| match value {
            Value::Config(value) => value.as_str(),
            Value::Secret { value, .. } => value.expose(),
        })
    }

    /// The permits of its requests in flight.
    pub fn requests(&self) -> &Arc<Semaphore> {
        &self.requests
    }
}

/// The whole grants file: every plugin's grants, and where they came from.
#[derive(Debug)]
pub struct Grants {
    file: PathBuf,
    plugins: BTreeMap<String, Arc<PluginGrants>>,
    outbound: OutboundTrust,
}

impl Grants {
    /// No grants at all, as when `file` does not exist.
    pub fn none(file: impl Into<PathBuf>) -> Self {
        Self {
            file: file.into(),
            plugins: BTreeMap::new(),
            outbound: OutboundTrust::default(),
        }
    }

    /// Read `file`; a missing file grants nothing. Secrets are read now, from the
    /// environment and from files relative to `file`'s directory.
    pub fn load(file: &Path) -> Result<Self, GrantsError> {
        match std::fs::read_to_string(file) {
            Ok(text) => file::parse(file, &text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::none(file)),
            Err(cause) => Err(GrantsError::Read {
                file: file.to_owned(),
                cause,
            }),
        }
    }

    /// Parse `text` as the contents of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, GrantsError> {
        file::parse(file, text)
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

    /// What `https://` requests of every plugin trust.
    pub fn outbound(&self) -> &OutboundTrust {
        &self.outbound
    }

    /// What `plugin` is granted, if the file has a section for it.
    pub fn plugin(&self, plugin: &str) -> Option<&Arc<PluginGrants>> {
        self.plugins.get(plugin)
    }

    /// Whether `plugin` may send a request to `origin`, and how the grant matched.
    pub fn check(&self, plugin: &str, origin: &RequestOrigin) -> Result<Match, Box<Refusal>> {
        let matched = self.plugin(plugin).and_then(|grants| {
            grants
                .allowed_outbound_hosts
                .iter()
                .filter_map(|grant| grant.matches(origin))
                .max_by_key(|matched| *matched == Match::Explicit)
        });
        matched.ok_or_else(|| {
            Box::new(Refusal::NotGranted {
                origin: text::bounded(&origin.to_string(), NAME_MAX).into_owned(),
                plugin: plugin.to_owned(),
                section: section(plugin),
                grant: text::bounded(&origin.suggested_grant(), NAME_MAX).into_owned(),
                file: self.file.display().to_string(),
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
            file: self.file.display().to_string(),
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
/// reload (which replaces them). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedGrants(Arc<RwLock<Arc<Grants>>>);

impl SharedGrants {
    /// Start with `grants`.
    pub fn new(grants: Grants) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(grants))))
    }

    /// The grants in force now.
    pub fn current(&self) -> Arc<Grants> {
        Arc::clone(&self.0.read().unwrap_or_else(|poison| poison.into_inner()))
    }

    /// Put `grants` in force for the jobs that start from now on.
    pub fn replace(&self, grants: Grants) {
        *self.0.write().unwrap_or_else(|poison| poison.into_inner()) = Arc::new(grants);
    }
}

impl Default for SharedGrants {
    fn default() -> Self {
        Self::new(Grants::none(FILE_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(scheme: &str, host: &str, port: u16) -> RequestOrigin {
        RequestOrigin::new(scheme, host, Some(port)).expect("http(s)")
    }

    #[test]
    fn a_request_no_grant_matches_is_refused_naming_the_line_that_would_allow_it() {
        let grants = Grants::parse(
            Path::new("plugins/jobhost.toml"),
            "[plugins.webhook]\nallowed_outbound_hosts = [\"https://hooks.example.com\"]\n",
        )
        .expect("valid");
        let refusal = grants
            .check("webhook", &origin("https", "evil.example", 443))
            .expect_err("not granted");
        assert_eq!(
            refusal.to_string(),
            "outbound request to `https://evil.example:443` is not allowed for plugin \
             `webhook`; to allow it add \"https://evil.example\" to allowed_outbound_hosts \
             under [plugins.webhook] in plugins/jobhost.toml"
        );
        assert!(
            grants
                .check("webhook", &origin("https", "hooks.example.com", 443))
                .is_ok()
        );
    }

    #[test]
    fn a_plugin_without_a_section_is_granted_nothing() {
        let grants = Grants::none("jobhost.toml");
        let refusal = grants
            .check("my.plugin", &origin("http", "127.0.0.1", 8080))
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
            grants.check("p", &origin("http", "127.0.0.1", 8080)),
            Ok(Match::Explicit)
        );
        assert_eq!(
            grants.check("p", &origin("http", "localhost", 8080)),
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
             allowed_outbound_hosts under [plugins.p] in jobhost.toml"
        );
    }
}
