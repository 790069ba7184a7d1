//! What `GET /plugins` shows of a plugin's grants: origins, limits, and the names of its
//! config values and secrets, never a value.

use serde::{Deserialize, Serialize};

use crate::grants::{OutboundTrust, PluginGrants, Value};

/// A plugin's grants from the grants file, in [`PluginView`](super::api::PluginView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantsView {
    /// The origins it may send requests to, as the file writes them.
    pub allowed_outbound_hosts: Vec<String>,
    /// Requests it may have in flight at once.
    pub max_concurrent_requests: usize,
    /// Bytes of one response body it may read.
    pub max_response_bytes: u64,
    /// How long one request may take, at most the job's deadline.
    pub request_timeout_ms: u64,
    /// The keys of its config values (values are in the grants file, not here).
    pub config_keys: Vec<String>,
    /// Its secrets, by key and source; never their values.
    pub secrets: Vec<SecretView>,
    /// The CA file its `https://` requests trust besides the webpki roots, as the grants
    /// file writes it (`[outbound] ca_certificates`, for every plugin); never its contents.
    #[serde(default)]
    pub ca_certificates: Option<String>,
}

/// A secret's key and where its value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretView {
    /// The key the plugin reads it by.
    pub key: String,
    /// `env` or `file`.
    pub source: String,
    /// The variable's name or the file's path.
    pub from: String,
}

impl GrantsView {
    /// What `grants` grants a plugin, whose `https://` requests trust `trust`.
    pub fn new(grants: &PluginGrants, trust: &OutboundTrust) -> Self {
        let mut config_keys = Vec::new();
        let mut secrets = Vec::new();
        for (key, value) in &grants.values {
            match value {
                Value::Config(_) => config_keys.push(key.clone()),
                Value::Secret { source, .. } => secrets.push(SecretView {
                    key: key.clone(),
                    source: source.kind().to_owned(),
                    from: source.name().to_owned(),
                }),
            }
        }
        Self {
            allowed_outbound_hosts: grants
                .allowed_outbound_hosts
                .iter()
                .map(|origin| origin.as_str().to_owned())
                .collect(),
            max_concurrent_requests: grants.max_concurrent_requests,
            max_response_bytes: grants.max_response_bytes,
            request_timeout_ms: super::api::millis(grants.request_timeout),
            config_keys,
            secrets,
            ca_certificates: trust.ca_certificates().map(str::to_owned),
        }
    }
}
