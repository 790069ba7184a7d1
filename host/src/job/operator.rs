//! Who gave an operator command and when: the `by` and `at` that a cancelled job carries
//! into its dead letter, its log line and the dashboard.
//!
//! # Contract
//! - An [`Operator`] is whatever a client sent as its identity, so it is hostile until
//!   checked: [`Operator::new`] refuses an empty one, one longer than [`OPERATOR_MAX`]
//!   bytes and one with a control character, a line separator or a bidi control (the rule
//!   of [`crate::text`], so it needs no escaping where it is shown); no other constructor exists, and deserializing checks the same.
//! - A [`Cancellation`] renders the reason its dead letter carries,
//!   `cancelled by {by} at {at}` with `at` in RFC 3339 UTC to the second, from the typed
//!   value; nothing parses the reason back.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use jobhost_sdk::text::is_escaped;

use super::Utc;

/// The longest [`Operator`], in bytes: room for `user@host.domain`, not for a payload.
pub const OPERATOR_MAX: usize = 128;

/// Who gave an operator command, e.g. `alice@build-7`: at most [`OPERATOR_MAX`] bytes,
/// not empty, without control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Operator(String);

impl Operator {
    /// `name` as an operator, or why it cannot be one.
    pub fn new(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("it is empty".to_owned());
        }
        if name.len() > OPERATOR_MAX {
            return Err(format!(
                "it is {} bytes long, the limit is {OPERATOR_MAX}",
                name.len()
            ));
        }
        if name.chars().any(is_escaped) {
            return Err("it contains a control character".to_owned());
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as it was given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Operator {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Self::new(&name).map_err(|reason| {
            serde::de::Error::custom(format!("`by` is not an operator: {reason}"))
        })
    }
}

/// Who cancelled a job and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancellation {
    /// Who asked.
    pub by: Operator,
    /// When they asked, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl fmt::Display for Cancellation {
    /// `cancelled by alice@host at 2026-12-07T08:01:02Z`: the dead letter's reason.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cancelled by {} at {}", self.by, Utc(self.at_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancellation_renders_who_and_when_in_utc() {
        let cancellation = Cancellation {
            by: Operator::new("alice@host").expect("an operator"),
            at_ms: 1_796_630_462_000,
        };
        assert_eq!(
            cancellation.to_string(),
            "cancelled by alice@host at 2026-12-07T08:01:02Z"
        );
    }

    #[test]
    fn an_operator_is_short_printable_and_not_empty() {
        assert!(Operator::new("bob@ci-3.example.com").is_ok());
        for (name, why) in [
            (String::new(), "empty"),
            ("a".repeat(OPERATOR_MAX + 1), "bytes long"),
            ("eve\nINFO forged line".to_owned(), "control character"),
            ("eve\u{202e}".to_owned(), "control character"),
        ] {
            let err = Operator::new(&name).expect_err(&name);
            assert!(err.contains(why), "`{name}`: {err}");
        }
        let parsed: Result<Operator, _> = serde_json::from_str("\"x\\u0007\"");
        assert!(parsed.is_err(), "deserializing checks the same rule");
    }
}
