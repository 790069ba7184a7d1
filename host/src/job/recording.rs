//! A recorded attempt: what a job was given and every answer the host gave its guest, so
//! the attempt can be played again offline, bit for bit (docs/replay.md).
//!
//! # Contract
//! - A [`Recording`] holds the job as it was delivered (envelope fields and payload), the
//!   plugin that ran it (file name and sha256), how the attempt ended, the guest's log
//!   lines, the seeds its randomness came from, and every import answer in call order:
//!   clock readings, config values, follow-up ids, HTTP responses (status, headers, the
//!   body as far as the guest read it, or the error it got).
//! - A secret is recorded by its key only, never its value ([`ConfigAnswer::Secret`]);
//!   request headers and bodies the guest sent are not recorded (they may carry secrets),
//!   only each request's method and URL.
//! - A recording is bounded: once what it holds passes [`RECORDING_MAX_BYTES`], later
//!   answers are not kept and [`Recording::cut`] says after how many imports it stops;
//!   log lines stop at [`LOG_LINES_MAX`].
//! - The seeds make randomness replayable: whoever holds a recording can derive the random
//!   bytes that attempt drew (see docs/replay.md, "What a recording holds").

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Outcome;

/// The recording format this host writes and reads.
pub const RECORDING_FORMAT: u32 = 1;

/// What one recording may hold, in bytes of strings and bodies; past this it is cut.
pub const RECORDING_MAX_BYTES: usize = 1024 * 1024;

/// Log lines one recording keeps.
pub const LOG_LINES_MAX: usize = 1000;

/// One attempt of one job, as the host ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// [`RECORDING_FORMAT`] when written.
    pub format: u32,
    /// The job as delivered.
    pub job: RecordedJob,
    /// The plugin that ran it.
    pub plugin: RecordedPlugin,
    /// When the attempt started, milliseconds since the Unix epoch.
    pub recorded_at_ms: u64,
    /// How the attempt ended.
    pub outcome: RecordedOutcome,
    /// Where the guest's randomness came from.
    pub seeds: Seeds,
    /// Every import answer, in call order.
    pub imports: Vec<Import>,
    /// The guest's log lines, in order.
    pub log: Vec<LogLine>,
    /// The number of imports after which the recording was cut at [`RECORDING_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<usize>,
}

/// The job a recording ran: the envelope's fields the guest sees, and its payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedJob {
    /// The job's id, the same across its attempts.
    pub job_id: Uuid,
    /// Its job type.
    pub job_type: String,
    /// The work queue it came from.
    pub queue: String,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// The policy's total attempts.
    pub max_attempts: u32,
    /// How many times it had been deferred.
    pub deferrals: u32,
    /// Its broker priority.
    pub priority: u8,
    /// Its age when the attempt started, in milliseconds.
    pub age_ms: u64,
    /// The attempt's timeout, in milliseconds.
    pub timeout_ms: u64,
    /// The payload's JSON text, as delivered.
    pub payload: String,
    /// The batch the job was a member of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Uuid>,
}

/// The plugin a recording ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPlugin {
    /// Its file's stem in the plugin directory.
    pub name: String,
    /// The sha256 of its binary, 64 lowercase hex digits.
    pub sha256: String,
}

/// How an attempt ended, as a recording and a replay report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOutcome {
    /// `completed`, `retryable`, `fatal`, `deferred`, `undecodable` or `crashed`
    /// (`failed` for an error kind this host does not know).
    pub kind: String,
    /// The error's message, or the crash's reason; none for a completed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A deferral's delay, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl From<&Outcome> for RecordedOutcome {
    fn from(outcome: &Outcome) -> Self {
        use jobhost_sdk::JobError;
        let (kind, reason, delay_ms) = match outcome {
            Outcome::Completed { .. } => ("completed", None, None),
            Outcome::Failed(JobError::Retryable(message)) => {
                ("retryable", Some(message.clone()), None)
            }
            Outcome::Failed(JobError::Fatal(message)) => ("fatal", Some(message.clone()), None),
            Outcome::Failed(JobError::Deferred { delay, reason, .. }) => (
                "deferred",
                Some(reason.clone()),
                Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            ),
            // A kind a newer SDK adds is shown by its message.
            Outcome::Failed(other) => ("failed", Some(other.to_string()), None),
            Outcome::Undecodable(message) => ("undecodable", Some(message.clone()), None),
            Outcome::Crashed(reason) => ("crashed", Some(reason.clone()), None),
        };
        Self {
            kind: kind.to_owned(),
            reason,
            delay_ms,
        }
    }
}

impl fmt::Display for RecordedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if let Some(delay) = self.delay_ms {
            write!(f, " for {delay} ms")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

/// The seeds of the attempt's random generators, as 64 hex digits each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seeds {
    /// `wasi:random/random`'s generator.
    pub secure: String,
    /// `wasi:random/insecure`'s generator.
    pub insecure: String,
    /// What `wasi:random/insecure-seed` answers, as 32 hex digits.
    pub insecure_seed: String,
}

/// One import call and the answer the guest got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "import", rename_all = "snake_case")]
pub enum Import {
    /// `wasi:clocks/wall-clock.now`, in nanoseconds since the Unix epoch.
    WallClock {
        /// The reading.
        ns: u64,
    },
    /// `wasi:clocks/monotonic-clock.now`, in nanoseconds.
    MonotonicClock {
        /// The reading.
        ns: u64,
    },
    /// `wasi:config/store.get`.
    Config {
        /// The key asked for.
        key: String,
        /// What the guest got.
        answer: ConfigAnswer,
    },
    /// `wasi:config/store.get-all`: every key, with its answer.
    ConfigAll {
        /// The keys and their answers.
        entries: Vec<(String, ConfigAnswer)>,
    },
    /// `host.enqueue`: a follow-up's id, or why it was refused.
    Enqueue {
        /// The follow-up's job type.
        job_type: String,
        /// Its id, or the refusal.
        answer: Result<String, String>,
    },
    /// One outgoing HTTP request and its response.
    Http {
        /// The request's method.
        method: String,
        /// The request's URL.
        url: String,
        /// The response, or the error the guest got.
        answer: Result<HttpResponse, HttpError>,
    },
}

impl Import {
    /// Whether the call reaches outside the guest: a config read, a follow-up, an HTTP
    /// request. A replay of another version must make these in the recorded order;
    /// clocks are answered from their own stream.
    pub fn is_call(&self) -> bool {
        !matches!(self, Self::WallClock { .. } | Self::MonotonicClock { .. })
    }

    /// The call as a replay's trace and divergence show it, without its answer.
    pub fn call(&self) -> String {
        match self {
            Self::WallClock { .. } => "wall-clock now".to_owned(),
            Self::MonotonicClock { .. } => "monotonic-clock now".to_owned(),
            Self::Config { key, .. } => format!("config get {key:?}"),
            Self::ConfigAll { .. } => "config get-all".to_owned(),
            Self::Enqueue { job_type, .. } => format!("enqueue {job_type}"),
            Self::Http { method, url, .. } => format!("http {method} {url}"),
        }
    }

    /// The answer as a replay's trace shows it.
    pub fn answer(&self) -> String {
        match self {
            Self::WallClock { ns } | Self::MonotonicClock { ns } => format!("{ns} ns"),
            Self::Config { answer, .. } => answer.to_string(),
            Self::ConfigAll { entries } => format!("{} entries", entries.len()),
            Self::Enqueue { answer, .. } => match answer {
                Ok(id) => format!("id {id}"),
                Err(refusal) => format!("refused: {refusal}"),
            },
            Self::Http { answer, .. } => match answer {
                Ok(response) => format!(
                    "{} with {} bytes{}",
                    response.status,
                    response.body.len(),
                    response
                        .body_error
                        .as_ref()
                        .map(|error| format!(", then {}", error.code))
                        .unwrap_or_default()
                ),
                Err(error) => format!("error {}", error.code),
            },
        }
    }

    /// Bytes this answer adds to a recording.
    pub(crate) fn size(&self) -> usize {
        const ENTRY: usize = 32;
        ENTRY
            + match self {
                Self::WallClock { .. } | Self::MonotonicClock { .. } => 0,
                Self::Config { key, answer } => key.len() + answer.size(),
                Self::ConfigAll { entries } => entries
                    .iter()
                    .map(|(key, answer)| ENTRY + key.len() + answer.size())
                    .sum(),
                Self::Enqueue { job_type, answer } => {
                    job_type.len() + answer.as_ref().map_or_else(String::len, String::len)
                }
                Self::Http {
                    method,
                    url,
                    answer,
                } => {
                    method.len()
                        + url.len()
                        + answer
                            .as_ref()
                            .map_or_else(HttpError::size, HttpResponse::size)
                }
            }
    }
}

/// What a config read answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigAnswer {
    /// No such key.
    Missing,
    /// A plain config value.
    Value(String),
    /// A secret: its value is never recorded, and a replay answers a placeholder.
    Secret,
}

impl ConfigAnswer {
    fn size(&self) -> usize {
        match self {
            Self::Value(value) => value.len(),
            Self::Missing | Self::Secret => 0,
        }
    }
}

impl fmt::Display for ConfigAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("none"),
            Self::Value(value) => write!(f, "{value:?}"),
            Self::Secret => f.write_str("(a secret, not recorded)"),
        }
    }
}

/// A response as the guest read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// Its status code.
    pub status: u16,
    /// Its headers, in order, values read as UTF-8 (lossy).
    pub headers: Vec<(String, String)>,
    /// The body bytes the guest read, in order.
    pub body: Body,
    /// The error that ended the body early (the host's cap, the deadline, the connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_error: Option<HttpError>,
}

impl HttpResponse {
    fn size(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        headers + self.body.len() + self.body_error.as_ref().map_or(0, HttpError::size)
    }
}

/// Body bytes: text when they are UTF-8, else hex.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BodyForm", into = "BodyForm")]
pub struct Body(pub Vec<u8>);

impl Body {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum BodyForm {
    Text(String),
    Hex { hex: String },
}

impl From<Body> for BodyForm {
    fn from(body: Body) -> Self {
        match String::from_utf8(body.0) {
            Ok(text) => Self::Text(text),
            Err(err) => Self::Hex {
                hex: err.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
    }
}

impl From<BodyForm> for Body {
    fn from(form: BodyForm) -> Self {
        match form {
            BodyForm::Text(text) => Self(text.into_bytes()),
            BodyForm::Hex { hex } => Self(
                hex.as_bytes()
                    .chunks(2)
                    .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
                    .collect(),
            ),
        }
    }
}

/// A `wasi:http` error code the guest got, by its WIT name, with its detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpError {
    /// The `error-code` case, e.g. `connection-refused`.
    pub code: String,
    /// The case's text, where it carries one (a refusal's message, a cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the request failed, in milliseconds from the attempt's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

impl HttpError {
    fn size(&self) -> usize {
        self.code.len() + self.detail.as_ref().map_or(0, String::len)
    }
}

/// A line of the guest's log, as the host rendered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// `log` for the `host.log` import, `stdout` or `stderr` for a printed line.
    pub source: String,
    /// The message, bounded as the host logs it.
    pub message: String,
    /// Its fields rendered `key="value"`, space-separated.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fields: String,
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>5} {}: {}",
            self.level.to_uppercase(),
            self.source,
            self.message
        )?;
        if !self.fields.is_empty() {
            write!(f, " {}", self.fields)?;
        }
        Ok(())
    }
}

/// Where the worker hands the recordings of attempts that did not complete.
pub trait Recorder: Send + Sync + fmt::Debug {
    /// Keep `recording`; never blocks the attempt's settlement.
    fn keep(&self, recording: Recording);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_text_when_it_is_utf8_and_hex_otherwise_and_reads_back_the_same() {
        let text = serde_json::to_string(&Body(b"oops: 500".to_vec())).expect("json");
        assert_eq!(text, r#""oops: 500""#);
        let bytes = Body(vec![0xff, 0x00, 0x41]);
        let hex = serde_json::to_string(&bytes).expect("json");
        assert_eq!(hex, r#"{"hex":"ff0041"}"#);
        assert_eq!(serde_json::from_str::<Body>(&hex).expect("hex"), bytes);
    }

    #[test]
    fn an_outcome_keeps_its_kind_reason_and_delay() {
        let deferred = Outcome::Failed(jobhost_sdk::JobError::deferred_because(
            std::time::Duration::from_secs(2),
            "busy",
        ));
        let recorded = RecordedOutcome::from(&deferred);
        assert_eq!(recorded.to_string(), "deferred for 2000 ms: busy");
        let crashed = RecordedOutcome::from(&Outcome::Crashed("boom".into()));
        assert_eq!(crashed.to_string(), "crashed: boom");
    }
}
