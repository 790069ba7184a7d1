//! Concurrency caps the operator sets in the grants file, fleet-wide: at most N jobs of a
//! queue, or of one key of a job type, run at once across every host on the broker (see
//! docs/flow-control.md). Reloaded with the rest of the file; a cap set here overrides the
//! one a plugin declares ([`Grants::queue_concurrency`](super::Grants::queue_concurrency)).
//! The numbers and keys follow the SDK's rules (`jobhost_sdk::limits`), as plugins' do.
//!
//! ```toml
//! [queues."emails"]
//! concurrency = 4                                   # 1..=MAX_CONCURRENCY
//! [jobs."email.Send"]
//! concurrency = { key = "customer_id", limit = 2 }  # the payload's top-level field
//! ```
//!
//! # Contract
//! - A limit is 1..=[`MAX_CONCURRENCY`]; a key names a top-level field of the payload,
//!   1..=[`KEY_NAME_MAX`] bytes of ASCII letters, digits, `_` and `-`; a section names a
//!   queue or a job type of at most [`NAME_MAX`] bytes without control characters.
//!   Anything else refuses the file with its line.
//! - A job's key ([`key_of`]) is what its payload holds under the field: a string
//!   as its text, a number or a boolean as JSON writes it. A payload without the field, or
//!   with `null`, an array or an object there, falls in one bucket of its own
//!   ([`CapKey::Missing`]), so a job cannot escape its cap by leaving the key out.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use toml::Spanned;

use jobhost_sdk::limits::{check_concurrency, check_key};

use super::GrantsError;
use super::file::Lines;
use crate::text::{self, NAME_MAX};

pub use jobhost_sdk::limits::{KEY_NAME_MAX, KeyCap, MAX_CONCURRENCY};

/// Every cap of the grants file, by queue and by job type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    queues: BTreeMap<String, u32>,
    jobs: BTreeMap<String, KeyCap>,
}

/// What a job's payload holds under its cap's key field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapKey {
    /// A string, a number or a boolean, as text (a string without its quotes).
    Value(String),
    /// No field, or `null`, an array or an object: one bucket for all such jobs.
    Missing,
}

impl Caps {
    /// The cap of `queue`, if the file sets one.
    pub fn queue(&self, queue: &str) -> Option<u32> {
        self.queues.get(queue).copied()
    }

    /// The per-key cap of `job_type`, if the file sets one.
    pub fn job(&self, job_type: &str) -> Option<&KeyCap> {
        self.jobs.get(job_type)
    }

    /// Whether the file sets no cap at all.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.jobs.is_empty()
    }
}

/// What `payload` holds under its top-level field `field`, the key of a cap or a rate limit
/// per key. Only the top level is parsed into borrowed raw values, so a large payload costs
/// one scan, not a tree.
pub fn key_of(field: &str, payload: &RawValue) -> CapKey {
    let Ok(fields) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(payload.get()) else {
        // An escaped field name cannot be borrowed; read those payloads owned.
        return key_of_owned(field, payload);
    };
    fields
        .get(field)
        .map_or(CapKey::Missing, |value| scalar(value))
}

fn key_of_owned(field: &str, payload: &RawValue) -> CapKey {
    serde_json::from_str::<BTreeMap<String, &RawValue>>(payload.get())
        .ok()
        .and_then(|fields| fields.get(field).map(|value| scalar(value)))
        .unwrap_or(CapKey::Missing)
}

fn scalar(value: &RawValue) -> CapKey {
    match serde_json::from_str::<serde_json::Value>(value.get()) {
        Ok(serde_json::Value::String(text)) => CapKey::Value(text),
        Ok(number @ serde_json::Value::Number(_)) => CapKey::Value(number.to_string()),
        Ok(serde_json::Value::Bool(flag)) => CapKey::Value(flag.to_string()),
        _ => CapKey::Missing,
    }
}

/// `[queues.NAME]`: its cap, its rate limit (`rates`), whether the file pauses it, or any
/// of these.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QueueSection {
    concurrency: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) paused: bool,
    /// `record = false` keeps no recording of the queue's failed attempts.
    #[serde(default = "recorded")]
    pub(super) record: bool,
    /// The share of completed attempts whose recording is kept too, 0 to 1 (default 0).
    pub(super) record_completed: Option<Spanned<f64>>,
    pub(super) rate: Option<Spanned<String>>,
    pub(super) burst: Option<Spanned<i64>>,
}

fn recorded() -> bool {
    true
}

/// `[jobs.TYPE]`: its per-key cap, its per-key rate limit (`rates`), or both.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobSection {
    concurrency: Option<Spanned<KeyCapEntry>>,
    pub(super) rate: Option<Spanned<super::rates::KeyRateEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyCapEntry {
    key: Spanned<String>,
    limit: Spanned<i64>,
}

/// Check the `[queues]` and `[jobs]` sections of a grants file.
pub(super) fn parse(
    lines: &Lines<'_>,
    queues: BTreeMap<Spanned<String>, QueueSection>,
    jobs: BTreeMap<Spanned<String>, JobSection>,
) -> Result<Caps, GrantsError> {
    let mut caps = Caps::default();
    for (name, section) in queues {
        let name = section_name(lines, name, "queue")?;
        let Some(concurrency) = section.concurrency else {
            continue;
        };
        let limit = limit(lines, &concurrency, &name)?;
        caps.queues.insert(name, limit);
    }
    for (name, section) in jobs {
        let name = section_name(lines, name, "job type")?;
        let Some(concurrency) = section.concurrency else {
            continue;
        };
        let entry = concurrency.get_ref();
        let key = key_name(lines, &entry.key, "concurrency", &name)?;
        let limit = limit(lines, &entry.limit, &name)?;
        caps.jobs.insert(name, KeyCap { key, limit });
    }
    Ok(caps)
}

/// A key field name of `job_type`'s `what` (`concurrency`, `rate`), checked by the rule
/// plugins' declarations follow too.
pub(super) fn key_name(
    lines: &Lines<'_>,
    key: &Spanned<String>,
    what: &str,
    job_type: &str,
) -> Result<String, GrantsError> {
    let text = key.get_ref();
    check_key(text).map_err(|why| {
        lines.error(
            key.span(),
            format!(
                "{what} key `{}` of job type `{job_type}`: {why}",
                text::bounded(text, NAME_MAX)
            ),
        )
    })?;
    Ok(text.clone())
}

pub(super) fn section_name(
    lines: &Lines<'_>,
    name: Spanned<String>,
    what: &str,
) -> Result<String, GrantsError> {
    let text = name.get_ref();
    if text.is_empty() || text.len() > NAME_MAX || text.chars().any(char::is_control) {
        return Err(lines.error(
            name.span(),
            format!(
                "{what} `{}`: a name must be 1 to {NAME_MAX} bytes without control characters",
                text::bounded(text, NAME_MAX)
            ),
        ));
    }
    Ok(name.into_inner())
}

fn limit(lines: &Lines<'_>, limit: &Spanned<i64>, of: &str) -> Result<u32, GrantsError> {
    check_concurrency(*limit.get_ref())
        .map_err(|why| lines.error(limit.span(), format!("concurrency of `{of}` {why}")))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::grants::Grants;

    fn caps(text: &str) -> Result<Caps, String> {
        Grants::parse(Path::new("jobhost.toml"), text)
            .map(|grants| grants.caps().clone())
            .map_err(|err| err.to_string())
    }

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).expect("valid JSON")
    }

    #[test]
    fn queue_and_key_caps_are_read() {
        let caps = caps(
            "[queues.\"emails\"]\nconcurrency = 4\n\
             [jobs.\"email.Send\"]\nconcurrency = { key = \"customer_id\", limit = 2 }\n",
        )
        .expect("valid");
        assert_eq!(caps.queue("emails"), Some(4));
        assert_eq!(caps.queue("other"), None);
        let cap = caps.job("email.Send").expect("a key cap");
        assert_eq!((cap.key.as_str(), cap.limit), ("customer_id", 2));
    }

    #[test]
    fn a_queue_section_may_turn_recording_off_or_sample_completed_attempts_between_0_and_1() {
        let text = "[queues.a]\nrecord = false\n[queues.b]\nrecord_completed = 0.25\n";
        let grants = Grants::parse(Path::new("jobhost.toml"), text).expect("valid");
        assert!(!grants.records("a") && grants.records("b") && grants.records("c"));
        assert_eq!(grants.completed_sampled("b"), 0.25);
        assert_eq!(grants.completed_sampled("c"), 0.0);
        let refused = Grants::parse(
            Path::new("jobhost.toml"),
            "[queues.q]\nrecord_completed = 2.0\n",
        )
        .expect_err("a share above 1");
        assert!(
            refused.to_string().contains("line 2") && refused.to_string().contains("0 to 1"),
            "{refused}"
        );
    }

    #[test]
    fn a_queue_section_may_pause_its_queue_and_nothing_but_a_boolean_says_so() {
        let text = "[queues.\"emails\"]\npaused = true\n[queues.\"reports\"]\npaused = false\n";
        let grants = Grants::parse(Path::new("jobhost.toml"), text).expect("valid");
        let paused: Vec<&str> = grants.paused().iter().map(String::as_str).collect();
        assert_eq!(paused, ["emails"]);
        assert!(grants.caps().is_empty(), "a pause caps nothing");
        let refused = Grants::parse(Path::new("jobhost.toml"), "[queues.q]\npaused = \"yes\"\n")
            .expect_err("a string is not a pause");
        assert!(refused.to_string().contains("line 2"), "{refused}");
    }

    #[test]
    fn a_file_without_caps_caps_nothing() {
        assert!(caps("[plugins.a]\n").expect("valid").is_empty());
    }

    #[test]
    fn out_of_range_limits_and_bad_keys_are_refused_with_their_line() {
        for (text, wanted) in [
            (
                "[queues.q]\nconcurrency = 0\n",
                "line 2: concurrency of `q` is 0; it must be 1 to 1000",
            ),
            (
                "[queues.q]\nconcurrency = 1001\n",
                "line 2: concurrency of `q` is 1001",
            ),
            (
                "[queues.q]\nconcurrency = -1\n",
                "line 2: concurrency of `q` is -1",
            ),
            (
                "[jobs.t]\nconcurrency = { key = \"a.b\", limit = 2 }\n",
                "line 2: concurrency key `a.b` of job type `t`",
            ),
            (
                "[jobs.t]\nconcurrency = { key = \"\", limit = 2 }\n",
                "line 2: concurrency key `` of job type `t`",
            ),
            (
                "[jobs.t]\nconcurrency = { key = \"k\" }\n",
                "line 2: missing field `limit`",
            ),
            ("[jobs.t]\nconcurrency = 3\n", "line 2: invalid type"),
            ("[queues.q]\nlimit = 3\n", "line 2: unknown field `limit`"),
            (
                "[queues.\"\"]\nconcurrency = 3\n",
                "line 1: queue ``: a name must be",
            ),
        ] {
            let err = caps(text).expect_err(text);
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
        let long = "k".repeat(KEY_NAME_MAX + 1);
        let err = caps(&format!(
            "[jobs.t]\nconcurrency = {{ key = \"{long}\", limit = 1 }}\n"
        ))
        .expect_err("too long");
        assert!(err.contains("it must be 1 to 64"), "{err}");
    }

    #[test]
    fn a_key_is_a_scalar_field_and_everything_else_shares_one_bucket() {
        let cap = KeyCap {
            key: "customer_id".into(),
            limit: 1,
        };
        let value = |text: &str| CapKey::Value(text.into());
        for (payload, key) in [
            (r#"{"customer_id": "c-1", "x": [1, 2]}"#, value("c-1")),
            (r#"{"customer_id": 42}"#, value("42")),
            (r#"{"customer_id": true}"#, value("true")),
            (r#"{"custom\u0065r_id": "escaped"}"#, value("escaped")),
            (r#"{"customer_id": "a\u0000b"}"#, value("a\0b")),
            (r#"{"customer_id": null}"#, CapKey::Missing),
            (r#"{"customer_id": {"id": 1}}"#, CapKey::Missing),
            (r#"{"customer_id": [1]}"#, CapKey::Missing),
            (r#"{"other": 1}"#, CapKey::Missing),
            (r#"[1, 2]"#, CapKey::Missing),
            (r#""customer_id""#, CapKey::Missing),
        ] {
            assert_eq!(key_of(&cap.key, &raw(payload)), key, "{payload}");
        }
    }
}
