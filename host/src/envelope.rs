//! The job envelope: the JSON body of every message on a work queue.
//!
//! The same envelope as the `queuey` crate 1.x publishes, so queuey producers and workers
//! interoperate with jobhost: unknown fields are ignored, missing `deferrals`/`priority`
//! default to 0, and `correlation_id` is carried through retries untouched.
//!
//! `expires_at_ms` is jobhost's own: the job's [`Deadline`], omitted when it has none, so
//! queuey reads the envelope as before (its workers ignore the field, and their retries
//! drop it). It is the job's deadline, not an attempt's: retries and deferrals keep it; a
//! replay from the dead letters clears it. A number in `0..=u64::MAX` is a deadline
//! (`0` long past, `u64::MAX` never), `null` none, anything else (a string, a negative or
//! fractional number, one past `u64::MAX`) makes the body a malformed envelope.
//!
//! `unique_lock` is jobhost's own too: the name of the unique lock the job holds (see
//! [`crate::broker::UniqueLock`]), omitted when it holds none. Retries and deferrals keep
//! it, because the job still holds its key while it waits; the host that settles the job
//! for good releases it; a replay clears it. A value that does not name a lock is ignored.
//!
//! `batch` is jobhost's own as well: the batch the job is a member of (see
//! `crate::batches`), omitted when none; a value that is not a UUID makes the body a
//! malformed envelope.
//!
//! The trace context is not in the body: it travels in the message's `traceparent` and
//! `tracestate` headers (see [`crate::trace`]), which [`Envelope::trace`] holds on its way
//! to and from the broker.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::job::{Deadline, now_ms};
use crate::trace::TraceContext;

/// One job on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// UUID v4, kept across retries and deferrals.
    pub job_id: Uuid,
    /// The job type name a plugin declared.
    pub job_type: String,
    /// The work queue the job belongs to.
    pub queue: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Unix epoch milliseconds when the job was first enqueued.
    pub enqueued_at_ms: u64,
    /// How often the job was deferred; a deferral is not an attempt.
    #[serde(default)]
    pub deferrals: u32,
    /// Broker priority: 0 for normal work, the queue's maximum after a deferral.
    #[serde(default)]
    pub priority: u8,
    /// Caller-supplied id for tracing across services; never interpreted, and never read
    /// as a trace context (see [`crate::trace`], rule 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// When the job expires: delivered then or later, it is settled as expired without
    /// running (see [`crate::job::Expired`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<Deadline>,
    /// The unique lock the job holds while it is queued, held or running, released when
    /// it settles for good (see [`crate::broker::UniqueLock`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_lock: Option<String>,
    /// The schedule whose tick enqueued the job, if one did: the host that settles it for
    /// good records its outcome beside the firing (see `crate::schedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The batch the job is a member of, if any: the host that settles it for good
    /// records how it ended in the fleet's batch log before it acks it (see
    /// `crate::batches`). Retries, deferrals and replays keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Uuid>,
    /// The trace context of the message's headers, not of its body: set by the worker and
    /// producers before a publish, read from the headers by the broker.
    #[serde(skip)]
    pub trace: Option<TraceContext>,
    /// The job's JSON, kept as received so it reaches the guest without re-encoding.
    pub payload: Box<RawValue>,
}

impl PartialEq for Envelope {
    fn eq(&self, other: &Self) -> bool {
        self.job_id == other.job_id
            && self.job_type == other.job_type
            && self.queue == other.queue
            && self.attempt == other.attempt
            && self.enqueued_at_ms == other.enqueued_at_ms
            && self.deferrals == other.deferrals
            && self.priority == other.priority
            && self.correlation_id == other.correlation_id
            && self.expires_at_ms == other.expires_at_ms
            && self.unique_lock == other.unique_lock
            && self.schedule == other.schedule
            && self.batch == other.batch
            && self.trace == other.trace
            && self.payload.get() == other.payload.get()
    }
}

/// A message body that is not an envelope; serde's message is in the message, so it is
/// not also a `source()` that a printed chain would repeat.
#[derive(Debug, thiserror::Error)]
#[error("malformed envelope: {0}")]
pub struct MalformedEnvelope(serde_json::Error);

impl Envelope {
    /// A first attempt of a new job, enqueued now.
    pub fn new(
        job_type: impl Into<String>,
        queue: impl Into<String>,
        payload: Box<RawValue>,
    ) -> Self {
        Self {
            job_id: Uuid::new_v4(),
            job_type: job_type.into(),
            queue: queue.into(),
            attempt: 1,
            enqueued_at_ms: now_ms(),
            deferrals: 0,
            priority: 0,
            correlation_id: None,
            expires_at_ms: None,
            unique_lock: None,
            schedule: None,
            batch: None,
            trace: None,
            payload,
        }
    }

    /// Decode a message body.
    pub fn decode(body: &[u8]) -> Result<Self, MalformedEnvelope> {
        serde_json::from_slice(body).map_err(MalformedEnvelope)
    }

    /// The job id and type of a message body that decodes as an envelope, read without
    /// building its payload: the body is scanned once and the payload skipped, so what a
    /// dead-letter listing holds does not grow with the payloads it shows.
    pub fn head(body: &[u8]) -> Option<EnvelopeHead> {
        let head: Head = serde_json::from_slice(body).ok()?;
        Some(EnvelopeHead {
            job_id: head.job_id,
            job_type: head.job_type,
        })
    }

    /// Encode as a message body.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope always serializes: its fields are plain data")
    }

    /// The envelope of the next attempt: same job id, attempt + 1, priority back to 0
    /// (a retry earns no place at the front of the queue).
    pub fn next_attempt(&self) -> Self {
        Self {
            attempt: self.attempt.saturating_add(1),
            priority: 0,
            ..self.clone()
        }
    }

    /// The envelope of a deferral: same attempt, one more deferral, and the queue's
    /// highest priority so it runs ahead of the backlog for exactly one round.
    pub fn deferred(&self, max_priority: u8) -> Self {
        Self {
            deferrals: self.deferrals.saturating_add(1),
            priority: max_priority,
            ..self.clone()
        }
    }

    /// The same envelope naming `queue`: where the worker sends a retry or deferral, the
    /// queue its job type's route declares, whatever queue the message named.
    pub fn routed_to(mut self, queue: &str) -> Self {
        if self.queue != queue {
            queue.clone_into(&mut self.queue);
        }
        self
    }

    /// Time since the job was first enqueued.
    pub fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.enqueued_at_ms))
    }
}

/// What [`Envelope::head`] reads of an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeHead {
    /// The job id.
    pub job_id: Uuid,
    /// The job type name.
    pub job_type: String,
}

/// The fields [`Envelope`] requires, with the same types, so a body that has a head also
/// decodes; the payload is skipped.
#[derive(Deserialize)]
#[allow(dead_code)] // read only to check that each field is there and well typed
struct Head {
    job_id: Uuid,
    job_type: String,
    queue: String,
    attempt: u32,
    enqueued_at_ms: u64,
    #[serde(default)]
    deferrals: u32,
    #[serde(default)]
    priority: u8,
    #[serde(default)]
    correlation_id: Option<String>,
    #[serde(default)]
    expires_at_ms: Option<u64>,
    #[serde(default)]
    unique_lock: Option<String>,
    payload: serde::de::IgnoredAny,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).expect("valid json")
    }

    #[test]
    fn an_envelope_without_deferrals_or_priority_decodes_with_zeroes_and_ignores_unknown_fields() {
        let body = br#"{"job_id":"0b7d8a8e-3c5e-4b8e-9d5e-2f1b9c1a7e10","job_type":"t","queue":"q",
            "attempt":2,"enqueued_at_ms":5,"payload":{"a":[1, 2]},"from_the_future":true}"#;
        let envelope = Envelope::decode(body).expect("decodes");
        assert_eq!(
            (envelope.deferrals, envelope.priority, envelope.attempt),
            (0, 0, 2)
        );
        assert_eq!(
            envelope.payload.get(),
            r#"{"a":[1, 2]}"#,
            "payload kept byte for byte"
        );
    }

    #[test]
    fn the_head_of_an_envelope_is_its_job_and_a_body_that_does_not_decode_has_none() {
        let envelope = Envelope::new("t", "q", payload(r#"{"deep":[[[1]]]}"#));
        let head = Envelope::head(&envelope.encode()).expect("a head");
        assert_eq!(
            (head.job_id, head.job_type.as_str()),
            (envelope.job_id, "t")
        );
        let unfinished = br#"{"job_id":"0b7d8a8e-3c5e-4b8e-9d5e-2f1b9c1a7e10","job_type":"t","queue":"q","attempt":2,"enqueued_at_ms":5,"payload":{"a":"#;
        assert_eq!(Envelope::head(unfinished), None);
        assert_eq!(Envelope::head(b"{}"), None);
    }

    #[test]
    fn a_retry_keeps_the_job_id_increments_the_attempt_and_resets_the_priority() {
        let first = Envelope::new("t", "q", payload("{}")).deferred(10);
        let retry = first.next_attempt();
        assert_eq!(
            (retry.job_id, retry.attempt, retry.priority),
            (first.job_id, 2, 0)
        );
        assert_eq!(retry.deferrals, 1, "deferrals are history, not reset");
    }

    #[test]
    fn a_deferral_spends_no_attempt_and_takes_the_queue_maximum_priority() {
        let first = Envelope::new("t", "q", payload("{}"));
        let deferred = first.deferred(7);
        assert_eq!(
            (deferred.attempt, deferred.deferrals, deferred.priority),
            (1, 1, 7)
        );
    }

    #[test]
    fn a_rerouted_envelope_names_the_new_queue_and_keeps_everything_else() {
        let first = Envelope::new("t", "no.such.queue", payload("{}"));
        let routed = first.clone().routed_to("app.emails");
        assert_eq!(routed.queue, "app.emails");
        assert_eq!(routed.clone().routed_to(&first.queue), first);
    }

    #[test]
    fn encoding_round_trips() {
        let envelope = Envelope::new("t", "q", payload(r#"{"to":"a@b.c"}"#));
        assert_eq!(
            Envelope::decode(&envelope.encode()).expect("decodes"),
            envelope
        );
    }

    /// An envelope body whose `expires_at_ms` is `value`, as JSON text.
    fn expiring(value: &str) -> String {
        format!(
            r#"{{"job_id":"0b7d8a8e-3c5e-4b8e-9d5e-2f1b9c1a7e10","job_type":"t","queue":"q",
            "attempt":1,"enqueued_at_ms":5,"payload":{{}},"expires_at_ms":{value}}}"#
        )
    }

    #[test]
    fn any_u64_is_a_deadline_null_is_none_and_any_other_expiry_is_a_malformed_envelope() {
        let deadlines = [
            ("0", Some(0)),
            ("1796630462000", Some(1_796_630_462_000)),
            ("18446744073709551615", Some(u64::MAX)),
            ("null", None),
        ];
        for (value, deadline) in deadlines {
            let body = expiring(value);
            let envelope = Envelope::decode(body.as_bytes()).expect("decodes");
            assert_eq!(
                envelope.expires_at_ms.map(Deadline::epoch_ms),
                deadline,
                "{value}"
            );
            assert!(
                Envelope::head(body.as_bytes()).is_some(),
                "{value} has a head"
            );
        }
        for value in [
            r#""soon""#,
            "-1",
            "1.5",
            "18446744073709551616",
            "1e400",
            "{}",
        ] {
            let body = expiring(value);
            assert!(
                Envelope::decode(body.as_bytes()).is_err(),
                "`{value}` is malformed"
            );
            assert_eq!(
                Envelope::head(body.as_bytes()),
                None,
                "`{value}` has no head"
            );
        }
    }

    #[test]
    fn an_envelope_without_an_expiry_or_a_lock_is_written_without_the_fields() {
        let envelope = Envelope::new("t", "q", payload("{}"));
        let text = String::from_utf8(envelope.encode()).expect("utf-8");
        assert!(!text.contains("expires_at_ms"), "{text}");
        assert!(!text.contains("unique_lock"), "{text}");
    }

    #[test]
    fn retries_and_deferrals_keep_the_jobs_unique_lock() {
        let lock = Some("jobhost.unique.lock".to_owned());
        let first = Envelope {
            unique_lock: lock.clone(),
            ..Envelope::new("t", "q", payload("{}"))
        };
        let again = first.deferred(3).next_attempt().routed_to("other");
        let decoded = Envelope::decode(&again.encode()).expect("decodes");
        assert_eq!(decoded.unique_lock, lock);
        let wrong =
            br#"{"job_id":"0b7d8a8e-3c5e-4b8e-9d5e-2f1b9c1a7e10","job_type":"t","queue":"q",
            "attempt":1,"enqueued_at_ms":5,"payload":{},"unique_lock":5}"#;
        assert!(Envelope::decode(wrong).is_err());
        assert_eq!(Envelope::head(wrong), None, "no head where no envelope");
    }

    #[test]
    fn retries_and_deferrals_keep_the_jobs_deadline() {
        let deadline = Some(Deadline::from_epoch_ms(1_796_630_462_000));
        let first = Envelope {
            expires_at_ms: deadline,
            ..Envelope::new("t", "q", payload("{}"))
        };
        let again = first.deferred(3).next_attempt().routed_to("other");
        assert_eq!(again.expires_at_ms, deadline);
        assert_eq!(
            Envelope::decode(&again.encode())
                .expect("decodes")
                .expires_at_ms,
            deadline
        );
    }

    #[test]
    fn a_body_that_is_not_an_envelope_is_malformed() {
        let err = Envelope::decode(b"not json").expect_err("malformed");
        assert!(err.to_string().starts_with("malformed envelope: "), "{err}");
    }
}
