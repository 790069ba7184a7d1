//! Parsing `jobhost.toml`: serde for the shape, then each entry checked with its line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::Semaphore;
use toml::Spanned;

use super::origin::OriginPattern;
use super::schedule;
use super::secret::{HostSecrets, Secret, SecretSource};
use super::slots::RequestSlots;
use super::trust::OutboundTrust;
use super::{Grants, GrantsError, PluginGrants, Value};
use super::{caps, rates};
use crate::files::{self, Rules};
use crate::text::{self, NAME_MAX};

/// What a secret file must be: a key or a token, not a data set.
const SECRET_FILE: Rules = Rules::capped(64 * 1024, "a secret file may hold");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    outbound: OutboundSection,
    #[serde(default)]
    plugins: BTreeMap<String, PluginSection>,
    #[serde(default)]
    queues: BTreeMap<Spanned<String>, caps::QueueSection>,
    #[serde(default)]
    jobs: BTreeMap<Spanned<String>, caps::JobSection>,
    #[serde(default)]
    schedules: BTreeMap<String, Spanned<schedule::Section>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutboundSection {
    ca_certificates: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginSection {
    sha256: Option<Spanned<String>>,
    #[serde(default)]
    allowed_outbound_hosts: Vec<Spanned<String>>,
    max_concurrent_requests: Option<Spanned<u64>>,
    max_response_bytes: Option<Spanned<u64>>,
    request_timeout: Option<Spanned<String>>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    secrets: BTreeMap<String, Spanned<SecretEntry>>,
    probation: Option<super::probation::ProbationEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretEntry {
    env: Option<String>,
    file: Option<String>,
}

/// Reports errors with the line of a span of the file's text.
pub(super) struct Lines<'a> {
    file: &'a Path,
    text: &'a str,
    /// What no secret may be read from.
    host_secrets: &'a HostSecrets,
}

impl Lines<'_> {
    pub(super) fn error(
        &self,
        span: std::ops::Range<usize>,
        reason: impl Into<String>,
    ) -> GrantsError {
        let start = span.start.min(self.text.len());
        GrantsError::Invalid {
            file: self.file.to_owned(),
            line: self.text[..start].matches('\n').count() + 1,
            reason: reason.into(),
        }
    }
}

pub(super) fn parse(
    file: &Path,
    text: &str,
    host_secrets: &HostSecrets,
) -> Result<Grants, GrantsError> {
    let lines = Lines {
        file,
        text,
        host_secrets,
    };
    let document: Document = toml::from_str(text)
        .map_err(|err| lines.error(err.span().unwrap_or(0..0), err.message()))?;
    let outbound = match document.outbound.ca_certificates {
        None => OutboundTrust::default(),
        Some(path) => {
            OutboundTrust::with_ca_file(path.get_ref(), &relative_to(file, path.get_ref()))
                .map_err(|reason| lines.error(path.span(), reason))?
        }
    };
    let mut plugins = BTreeMap::new();
    for (name, section) in document.plugins {
        let grants = plugin(&lines, &name, section)?;
        plugins.insert(name, Arc::new(grants));
    }
    let rates = rates::parse(&lines, &document.queues, &document.jobs)?;
    // Named as `caps::parse` checks every section name, just below.
    let paused = document
        .queues
        .iter()
        .filter(|(_, section)| section.paused)
        .map(|(name, _)| name.get_ref().clone())
        .collect();
    let unrecorded = document
        .queues
        .iter()
        .filter(|(_, section)| !section.record)
        .map(|(name, _)| name.get_ref().clone())
        .collect();
    let mut sampled = BTreeMap::new();
    for (name, section) in &document.queues {
        let Some(share) = &section.record_completed else {
            continue;
        };
        let value = *share.get_ref();
        if !(0.0..=1.0).contains(&value) {
            return Err(lines.error(
                share.span(),
                format!(
                    "record_completed of `{}` is {value}; it is a share of completed attempts, 0 to 1",
                    name.get_ref()
                ),
            ));
        }
        sampled.insert(name.get_ref().clone(), value);
    }
    let caps = caps::parse(&lines, document.queues, document.jobs)?;
    let mut schedules = BTreeMap::new();
    for (name, section) in document.schedules {
        let whole = section.span();
        let parsed = schedule::parse(&name, whole, section.into_inner())
            .map_err(|(span, reason)| lines.error(span, reason))?;
        schedules.insert(name, Arc::new(parsed));
    }
    Ok(Grants {
        file: file.to_owned(),
        plugins,
        outbound,
        caps,
        rates,
        paused,
        unrecorded,
        sampled,
        schedules,
    })
}

fn plugin(
    lines: &Lines<'_>,
    name: &str,
    section: PluginSection,
) -> Result<PluginGrants, GrantsError> {
    let defaults = PluginGrants::empty();
    let sha256 = section
        .sha256
        .map(|pin| sha256_pin(lines, &pin))
        .transpose()?;
    let allowed_outbound_hosts = section
        .allowed_outbound_hosts
        .iter()
        .map(|grant| {
            OriginPattern::parse(grant.get_ref()).map_err(|reason| {
                lines.error(
                    grant.span(),
                    format!("allowed outbound host `{}`: {reason}", grant.get_ref()),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let limit_set = section.max_concurrent_requests.is_some();
    let max_concurrent_requests = match section.max_concurrent_requests {
        None => defaults.max_concurrent_requests,
        Some(n) => request_slots(lines, &n)?,
    };
    let max_response_bytes = match section.max_response_bytes {
        None => defaults.max_response_bytes,
        Some(n) if *n.get_ref() == 0 => {
            return Err(lines.error(n.span(), "max_response_bytes is 0; it must be at least 1"));
        }
        Some(n) => *n.get_ref(),
    };
    let request_timeout = match section.request_timeout {
        None => defaults.request_timeout,
        Some(timeout) => jobhost_sdk::parse_duration(timeout.get_ref()).map_err(|err| {
            lines.error(
                timeout.span(),
                format!("request_timeout `{}`: {err}", timeout.get_ref()),
            )
        })?,
    };
    let values = values(lines, name, section.config, section.secrets)?;
    let probation = section
        .probation
        .map(|entry| super::probation::parse(lines, entry))
        .transpose()?;
    Ok(PluginGrants {
        probation,
        sha256,
        allowed_outbound_hosts,
        max_concurrent_requests,
        limit_set,
        max_response_bytes,
        request_timeout,
        values,
        requests: RequestSlots::new(max_concurrent_requests),
    })
}

/// A `sha256` pin, lower-cased: 64 hex digits, as `sha256sum` prints them.
fn sha256_pin(lines: &Lines<'_>, pin: &Spanned<String>) -> Result<String, GrantsError> {
    let digest = pin.get_ref();
    if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(digest.to_ascii_lowercase());
    }
    Err(lines.error(
        pin.span(),
        format!(
            "sha256 `{}`: it must be 64 hex digits, as `sha256sum` prints them",
            text::bounded(digest, NAME_MAX)
        ),
    ))
}

/// `max_concurrent_requests`: at least 1, and no more than a semaphore holds.
fn request_slots(lines: &Lines<'_>, n: &Spanned<u64>) -> Result<usize, GrantsError> {
    usize::try_from(*n.get_ref())
        .ok()
        .filter(|n| (1..=Semaphore::MAX_PERMITS).contains(n))
        .ok_or_else(|| {
            lines.error(
                n.span(),
                format!(
                    "max_concurrent_requests is {}; it must be at least 1",
                    n.get_ref()
                ),
            )
        })
}

fn values(
    lines: &Lines<'_>,
    plugin: &str,
    config: BTreeMap<String, String>,
    secrets: BTreeMap<String, Spanned<SecretEntry>>,
) -> Result<BTreeMap<String, Value>, GrantsError> {
    let mut values: BTreeMap<String, Value> = config
        .into_iter()
        .map(|(key, value)| (key, Value::Config(value)))
        .collect();
    for (key, entry) in secrets {
        let entry_span = entry.span();
        if values.contains_key(&key) {
            return Err(lines.error(
                entry_span,
                format!(
                    "`{key}` of plugin `{plugin}` is both a config value and a secret; config \
                     values and secrets share one key space"
                ),
            ));
        }
        let (value, source) = read_secret(lines, &key, entry.into_inner())
            .map_err(|reason| lines.error(entry_span.clone(), reason))?;
        values.insert(key, Value::Secret { value, source });
    }
    Ok(values)
}

/// The secret `key` from where `entry` says; the error names the source, never a value.
fn read_secret(
    lines: &Lines<'_>,
    key: &str,
    entry: SecretEntry,
) -> Result<(Secret, SecretSource), String> {
    match (entry.env, entry.file) {
        (Some(name), None) => {
            lines.host_secrets.check_variable(&name).map_err(|reason| {
                format!("secret `{key}`: environment variable `{name}`: {reason}")
            })?;
            let value = std::env::var(&name)
                .map_err(|err| format!("secret `{key}`: environment variable `{name}`: {err}"))?;
            Ok((Secret::new(value), SecretSource::Env(name)))
        }
        (None, Some(path)) => {
            let full = relative_to(lines.file, &path);
            let named =
                |reason: String| format!("secret `{key}`: file `{}`: {reason}", full.display());
            lines.host_secrets.check_file(&full).map_err(named)?;
            let value = read_secret_file(&full).map_err(|err| named(err.to_string()))?;
            Ok((Secret::new(value), SecretSource::File(path)))
        }
        _ => Err(format!(
            "secret `{key}` must name exactly one source: {{ env = \"VAR\" }} or \
             {{ file = \"path\" }}"
        )),
    }
}

/// `path` as written, or under the directory of the grants file when relative.
fn relative_to(grants_file: &Path, path: &str) -> PathBuf {
    let dir = grants_file.parent().unwrap_or(Path::new(""));
    dir.join(path)
}

/// A secret file's text without its final line break.
fn read_secret_file(path: &Path) -> std::io::Result<String> {
    let mut text = files::read_text(path, &SECRET_FILE)?;
    let kept = text.trim_end_matches(['\n', '\r']).len();
    text.truncate(kept);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Grants, GrantsError> {
        parse(
            Path::new("plugins/jobhost.toml"),
            text,
            &HostSecrets::default(),
        )
    }

    fn error(text: &str) -> String {
        parse_text(text).expect_err("invalid").to_string()
    }

    #[test]
    fn a_section_gets_the_documented_defaults() {
        let grants = parse_text("[plugins.webhook]\n").expect("valid");
        let webhook = grants.plugin("webhook").expect("a section");
        assert_eq!(
            webhook.max_concurrent_requests,
            crate::grants::DEFAULT_MAX_CONCURRENT_REQUESTS,
            "a host's engine makes it its job concurrency"
        );
        assert_eq!(webhook.max_response_bytes, 10 * 1024 * 1024);
        assert_eq!(webhook.request_timeout, std::time::Duration::from_secs(30));
        assert!(webhook.allowed_outbound_hosts.is_empty());
        assert!(grants.plugin("other").is_none());
    }

    #[test]
    fn limits_config_values_and_secrets_are_read() {
        // A variable every test process has, so the test sets none.
        let path = std::env::var("PATH").expect("PATH is set");
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(dir.path().join("key.txt"), "from-a-file\n").expect("write");
        let file = dir.path().join("jobhost.toml");
        let text = "[plugins.webhook]\nmax_concurrent_requests = 2\nmax_response_bytes = 100\n\
                    request_timeout = \"250ms\"\n[plugins.webhook.config]\nendpoint = \"http://x\"\n\
                    [plugins.webhook.secrets]\nfrom_env = { env = \"PATH\" }\n\
                    from_file = { file = \"key.txt\" }\n";
        let grants = parse(&file, text, &HostSecrets::default()).expect("valid");
        let webhook = grants.plugin("webhook").expect("a section");
        assert_eq!(webhook.max_concurrent_requests, 2);
        assert_eq!(webhook.requests().available(), 2);
        assert_eq!(webhook.sha256, None);
        assert_eq!(webhook.max_response_bytes, 100);
        assert_eq!(
            webhook.request_timeout,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(webhook.value("endpoint"), Some("http://x"));
        assert_eq!(webhook.value("from_env"), Some(path.as_str()));
        assert_eq!(
            webhook.value("from_file"),
            Some("from-a-file"),
            "the final line break of a secret file is not part of the secret"
        );
        assert_eq!(webhook.value("missing"), None);
        let shown = format!("{grants:?}");
        assert!(
            !shown.contains(&path) && !shown.contains("from-a-file"),
            "Debug never shows a secret: {shown}"
        );
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_file_and_line() {
        let err = error("[plugins.webhook]\nallowed_outbound_hosts = []\nmax_requests = 3\n");
        assert!(
            err.starts_with("`plugins/jobhost.toml` line 3: unknown field `max_requests`"),
            "{err}"
        );
        let err = error("plugin = 1\n");
        assert!(err.contains("line 1: unknown field `plugin`"), "{err}");
    }

    #[test]
    fn a_malformed_origin_is_refused_with_its_line() {
        let err = error(
            "[plugins.webhook]\nallowed_outbound_hosts = [\n  \"https://ok.example\",\n  \"hooks.example.com\",\n]\n",
        );
        assert_eq!(
            err,
            "`plugins/jobhost.toml` line 4: allowed outbound host `hooks.example.com`: it needs \
             a scheme: `http://`, `https://` or `*://`"
        );
    }

    #[test]
    fn out_of_range_limits_and_bad_durations_are_refused() {
        assert!(
            error("[plugins.a]\nmax_concurrent_requests = 0\n")
                .contains("line 2: max_concurrent_requests is 0")
        );
        assert!(
            error("[plugins.a]\nmax_response_bytes = 0\n")
                .contains("line 2: max_response_bytes is 0")
        );
        assert!(
            error("[plugins.a]\nrequest_timeout = \"soon\"\n")
                .contains("line 2: request_timeout `soon`")
        );
    }

    #[test]
    fn a_ca_file_that_cannot_be_used_refuses_the_grants_file_with_its_line() {
        let err = error("[plugins.a]\n[outbound]\nca_certificates = \"certs/none.pem\"\n");
        assert!(
            err.starts_with(
                "`plugins/jobhost.toml` line 3: ca_certificates: `plugins/certs/none.pem` \
                 cannot be read: "
            ),
            "the path is resolved relative to the grants file: {err}"
        );
        assert!(error("[outbound]\nca_file = \"x\"\n").contains("line 2: unknown field `ca_file`"));
    }

    #[test]
    fn a_key_both_config_and_secret_is_refused() {
        let err = error(
            "[plugins.a.config]\ntoken = \"x\"\n[plugins.a.secrets]\ntoken = { env = \"HOME\" }\n",
        );
        assert!(
            err.contains("line 4: `token` of plugin `a` is both a config value and a secret"),
            "{err}"
        );
    }

    #[test]
    fn a_secret_that_cannot_be_read_is_refused_naming_its_source() {
        let err = error("[plugins.a.secrets]\nkey = { env = \"JOBHOST_GRANTS_TEST_NEVER_SET\" }\n");
        assert!(
            err.contains(
                "line 2: secret `key`: environment variable `JOBHOST_GRANTS_TEST_NEVER_SET`"
            ),
            "{err}"
        );
        let err = error("[plugins.a.secrets]\nkey = { file = \"no-such-file\" }\n");
        assert!(
            err.contains("secret `key`: file `plugins/no-such-file`"),
            "{err}"
        );
        let err = error("[plugins.a.secrets]\nkey = { env = \"A\", file = \"b\" }\n");
        assert!(err.contains("must name exactly one source"), "{err}");
    }

    #[test]
    fn a_digest_pin_is_64_hex_digits_kept_in_lowercase() {
        let digest = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
        let grants = parse_text(&format!("[plugins.a]\nsha256 = \"{digest}\"\n")).expect("valid");
        assert_eq!(
            grants.plugin("a").and_then(|a| a.sha256.as_deref()),
            Some(digest.to_ascii_lowercase().as_str())
        );
        for bad in [
            "9f86d0",
            &format!("{}g", &digest[..63]),
            &format!("{digest}0"),
        ] {
            let err = error(&format!("[plugins.a]\n\nsha256 = \"{bad}\"\n"));
            assert!(
                err.contains("line 3: sha256 `") && err.contains("it must be 64 hex digits"),
                "{err}"
            );
        }
    }
}
