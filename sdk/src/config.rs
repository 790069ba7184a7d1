//! Configuration values and secrets the operator gives this plugin, read with
//! [`get`] or [`require`].
//!
//! The operator writes them in the host's config file, `jobhost.toml`, under the name of
//! the plugin's file (`plugins/NAME.wasm`; `jobhost build` names it after the crate, with
//! underscores): plain values in `[plugins.NAME.config]`, secrets in
//! `[plugins.NAME.secrets]`, read by the host from an environment variable or a file so
//! they never sit in the config file itself. A plugin sees both in one key space, through
//! `wasi:config/store`: a key neither table has is `None`. Values are reloaded with the
//! plugins, so a job retried after the operator fixed a value reads the new one.
//!
//! ```no_run
//! use jobhost_sdk::prelude::*;
//!
//! fn endpoint() -> Result<String, JobError> {
//!     // A job cannot succeed before the operator sets it: `require` fails it as fatal.
//!     jobhost_sdk::config::require("endpoint")
//! }
//! ```
//!
//! Natively (in `cargo test`), the values are those given to
//! [`TestContext::config`](crate::testing::TestContext::config) while its `run` calls the
//! handler, and none at all outside a run.

use crate::JobError;

/// Why the host could not read a value; retrying may help, so it converts to
/// [`JobError::Retryable`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The source of the values failed (e.g. a secret file that cannot be read).
    #[error("the configuration source failed: {0}")]
    Upstream(String),
    /// The host's I/O failed.
    #[error("reading the configuration failed: {0}")]
    Io(String),
}

impl From<ConfigError> for JobError {
    fn from(error: ConfigError) -> Self {
        JobError::retryable(error.to_string())
    }
}

/// The value of `key` (a config value or a secret), or `None` when the operator gave this
/// plugin none; an error when the host could not read it, which `?` makes retryable.
///
/// ```
/// use jobhost_sdk::config;
/// use jobhost_sdk::prelude::*;
///
/// // As docs/plugin-authors.md writes it.
/// fn region() -> Result<String, JobError> {
///     Ok(config::get("region")?.unwrap_or_else(|| "eu-west-1".to_owned()))
/// }
/// assert_eq!(region(), Ok("eu-west-1".to_owned()), "no value outside a test run");
/// ```
pub fn get(key: &str) -> Result<Option<String>, ConfigError> {
    #[cfg(target_arch = "wasm32")]
    {
        bindings::wasi::config::store::get(key).map_err(ConfigError::from)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(crate::testing::config_value(key))
    }
}

/// The value of `key`, which the plugin cannot work without: a missing key is a
/// [`JobError::Fatal`] that names it and where the operator sets it, because no retry
/// within the job's policy would find it set; a failing host is retryable.
pub fn require(key: &str) -> Result<String, JobError> {
    get(key)?.ok_or_else(|| {
        JobError::fatal(format!(
            "the plugin needs the configuration value `{key}`: set it in `jobhost.toml` under \
             `[plugins.<plugin file name>.config]` (or `.secrets`)"
        ))
    })
}

#[cfg(target_arch = "wasm32")]
impl From<bindings::wasi::config::store::Error> for ConfigError {
    fn from(error: bindings::wasi::config::store::Error) -> Self {
        use bindings::wasi::config::store::Error;
        match error {
            Error::Upstream(msg) => Self::Upstream(msg),
            Error::Io(msg) => Self::Io(msg),
        }
    }
}

/// The `config` world of `sdk/wit`: `wasi:config/store`, imported only by plugins that
/// call [`get`].
#[cfg(target_arch = "wasm32")]
mod bindings {
    // Generated code: its unsafe blocks are the canonical-ABI glue.
    #![allow(
        unsafe_code,
        missing_docs,
        unreachable_pub,
        missing_debug_implementations
    )]

    wit_bindgen::generate!({
        path: "wit",
        world: "config",
        generate_all,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_test_run_no_value_is_configured() {
        assert_eq!(get("endpoint"), Ok(None));
    }

    #[test]
    fn a_missing_required_value_is_fatal_and_names_the_key() {
        assert_eq!(
            require("endpoint"),
            Err(JobError::fatal(
                "the plugin needs the configuration value `endpoint`: set it in `jobhost.toml` \
                 under `[plugins.<plugin file name>.config]` (or `.secrets`)"
            ))
        );
    }

    #[test]
    fn a_failing_configuration_source_is_retryable() {
        assert_eq!(
            JobError::from(ConfigError::Upstream("vault is sealed".to_owned())),
            JobError::retryable("the configuration source failed: vault is sealed")
        );
    }
}
