//! The wire mapping: envelopes and dead letters to AMQP properties, queue settings to
//! declaration arguments, and back for the admin helpers. Pure functions, no broker.
//!
//! The value types match what `queuey` 1.x writes (`x-attempt`, `x-deferrals` and
//! `x-attempts` as unsigned 32-bit integers, TTLs as 64-bit integers, the priority
//! limit as an unsigned byte), so queuey workers and operators' scripts read ours.

use std::time::{SystemTime, UNIX_EPOCH};

use jobhost_sdk::{QueueConfig, QueueType};
use lapin::BasicProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, MAX_SHORT_STRING_LENGTH, ShortString};

use crate::broker::{DeadLetterOut, HoldQueue};
use crate::envelope::Envelope;
use crate::text::{REASON_MAX, bounded};
use crate::trace::{TRACEPARENT, TRACESTATE, TraceContext};

pub(super) const HEADER_ATTEMPT: &str = "x-attempt";
pub(super) const HEADER_DEFERRALS: &str = "x-deferrals";
pub(super) use crate::broker::dead::{HEADER_ATTEMPTS, HEADER_DEATH_REASON, HEADER_ORIGINAL_QUEUE};

const CONTENT_TYPE_JSON: &str = "application/json";
const PERSISTENT: u8 = 2;

/// The properties of a job message: JSON, persistent, identified by its job id and
/// type, at the envelope's priority, with its counters as headers for operators (the
/// body stays the source of truth) and its trace context.
pub(super) fn job_properties(envelope: &Envelope) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(HEADER_ATTEMPT.into(), AMQPValue::LongUInt(envelope.attempt));
    headers.insert(
        HEADER_DEFERRALS.into(),
        AMQPValue::LongUInt(envelope.deferrals),
    );
    insert_trace(&mut headers, envelope.trace.as_ref());
    BasicProperties::default()
        .with_content_type(CONTENT_TYPE_JSON.into())
        .with_delivery_mode(PERSISTENT)
        .with_message_id(short(&envelope.job_id.to_string()))
        .with_type(short(&envelope.job_type))
        .with_priority(envelope.priority)
        .with_headers(headers)
}

/// The properties of an operator order on the control stream: JSON, persistent.
pub(super) fn order_properties() -> BasicProperties {
    BasicProperties::default()
        .with_content_type(CONTENT_TYPE_JSON.into())
        .with_delivery_mode(PERSISTENT)
}

/// The properties of a job message going into a hold queue: a job's, stamped with when it
/// went in (`timestamp`, seconds since the Unix epoch), so that a message the broker keeps
/// past its delay can be told from one still waiting (see `sweep`).
pub(super) fn held_properties(envelope: &Envelope, now: SystemTime) -> BasicProperties {
    let seconds = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    job_properties(envelope).with_timestamp(seconds)
}

/// The properties of a dead letter: persistent, with why and where from. The body is
/// not necessarily an envelope, so nothing else is claimed about it.
///
/// The reason is bounded ([`REASON_MAX`] bytes and a marker), because it can quote what a
/// producer sent (a job type, a decode error), and a header frame larger than the
/// connection's `frame_max` makes the broker close the whole connection. Every header of
/// a dead letter together stays under 4 KiB, the smallest `frame_max` AMQP allows (the
/// trace context adds at most 55 + 512 bytes: `TRACESTATE_MAX` bounds its state).
pub(super) fn dead_letter_properties(letter: &DeadLetterOut<'_>) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        HEADER_DEATH_REASON.into(),
        AMQPValue::LongString(LongString::from(&*bounded(letter.reason, REASON_MAX))),
    );
    headers.insert(
        HEADER_ORIGINAL_QUEUE.into(),
        AMQPValue::LongString(LongString::from(letter.queue)),
    );
    headers.insert(HEADER_ATTEMPTS.into(), AMQPValue::LongUInt(letter.attempts));
    insert_trace(&mut headers, letter.trace);
    BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_headers(headers)
}

/// The arguments of a work queue: its type, its priority levels and message TTL, when set.
///
/// A classic queue carries no `x-queue-type`, so its declaration stays the one `queuey`
/// sends. A quorum queue takes no `x-max-priority` (the broker refuses it): RabbitMQ 4
/// gives quorum queues two priority levels, normal (0-4) and high (5 and above), with no
/// argument, and RabbitMQ 3 none at all.
pub(super) fn work_queue_arguments(config: &QueueConfig) -> FieldTable {
    let mut arguments = type_arguments(config.queue_type);
    if config.max_priority > 0 && config.queue_type == QueueType::Classic {
        arguments.insert(
            "x-max-priority".into(),
            AMQPValue::ShortShortUInt(config.max_priority),
        );
    }
    if let Some(ttl) = config.message_ttl {
        // Because RabbitMQ refuses a TTL of more than 2^32 - 1 ms, and rounding down
        // could make a sub-millisecond TTL zero, which expires everything at once.
        let ms = ttl
            .as_nanos()
            .div_ceil(1_000_000)
            .clamp(1, u128::from(u32::MAX));
        arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ms as i64));
    }
    arguments
}

/// The arguments of a dead-letter queue: its type.
pub(super) fn dead_letter_queue_arguments(config: &QueueConfig) -> FieldTable {
    type_arguments(config.queue_type)
}

/// `x-queue-type` for a quorum queue; nothing for a classic one.
fn type_arguments(queue_type: QueueType) -> FieldTable {
    let mut arguments = FieldTable::default();
    if queue_type == QueueType::Quorum {
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
    }
    arguments
}

/// How much longer than a classic one a quorum hold queue lives without a declaration.
///
/// Because a queue that expires takes its messages with it, and a quorum hold queue keeps a
/// message past its TTL until the work queue has confirmed it (at-least-once): while the
/// work queue elects a new leader, or no host can declare the hold queue because the
/// cluster is failing over, messages wait there longer than two delays.
const QUORUM_HOLD_GRACE_MS: u64 = 10 * 60 * 1000;

/// The arguments of a hold queue: messages expire after the delay and are
/// dead-lettered through the default exchange back onto `config`'s work queue; the queue
/// itself expires after two delays without a declaration.
///
/// A quorum hold queue dead-letters `at-least-once`: it keeps each expired message until
/// the work queue has confirmed it, so a broker crash between the two cannot drop a
/// retry (a classic queue's dead-lettering is at-most-once). RabbitMQ honours that only
/// with `x-overflow = reject-publish` on the hold queue, and falls back to at-most-once
/// without it.
pub(super) fn hold_queue_arguments(config: &QueueConfig, hold: &HoldQueue) -> FieldTable {
    let mut arguments = type_arguments(config.queue_type);
    arguments.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(millis(hold.ttl_ms)),
    );
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(config.name.as_str())),
    );
    let expires_ms = match config.queue_type {
        QueueType::Classic => hold.expires_ms(),
        QueueType::Quorum => (hold.expires_ms() + QUORUM_HOLD_GRACE_MS).min(u64::from(u32::MAX)),
    };
    arguments.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(millis(expires_ms)),
    );
    if config.queue_type == QueueType::Quorum {
        arguments.insert(
            "x-dead-letter-strategy".into(),
            AMQPValue::LongString(LongString::from("at-least-once")),
        );
        arguments.insert(
            "x-overflow".into(),
            AMQPValue::LongString(LongString::from("reject-publish")),
        );
    }
    arguments
}

/// Every queue of a topology is declared with the same flags, so no two declarations
/// of one queue disagree and provoke `PRECONDITION_FAILED`. A quorum queue is always
/// durable (the broker refuses a transient one).
pub(super) fn declare_options(config: &QueueConfig) -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: config.durable || config.queue_type == QueueType::Quorum,
        ..QueueDeclareOptions::default()
    }
}

/// `traceparent` and, when there is one, `tracestate`, as long strings like other AMQP
/// clients write them.
fn insert_trace(headers: &mut FieldTable, trace: Option<&TraceContext>) {
    let Some(trace) = trace else {
        return;
    };
    headers.insert(
        TRACEPARENT.into(),
        AMQPValue::LongString(LongString::from(trace.parent.to_string())),
    );
    if let Some(state) = &trace.state {
        headers.insert(
            TRACESTATE.into(),
            AMQPValue::LongString(LongString::from(state.as_str())),
        );
    }
}

/// The trace context of a received message: a `traceparent` header that is a string (of
/// either AMQP kind) holding a valid value, and its `tracestate`. A header of any other
/// type, or an invalid value, is no context: the job starts a trace of its own.
pub(super) fn trace_context(properties: &BasicProperties) -> Option<TraceContext> {
    let headers = properties.headers().as_ref()?.inner();
    let bytes = |key: &str| match headers.get(key)? {
        AMQPValue::LongString(value) => Some(value.as_bytes()),
        AMQPValue::ShortString(value) => Some(value.as_str().as_bytes()),
        _ => None,
    };
    TraceContext::from_headers(bytes(TRACEPARENT)?, bytes(TRACESTATE))
}

/// A string header of a received message.
#[cfg(test)]
fn string_header(properties: &BasicProperties, key: &str) -> Option<String> {
    match properties.headers().as_ref()?.inner().get(key)? {
        AMQPValue::LongString(value) => {
            Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
        }
        AMQPValue::ShortString(value) => Some(value.to_string()),
        _ => None,
    }
}

/// An integer header of a received message, whatever integer type the sender chose.
#[cfg(test)]
fn u32_header(properties: &BasicProperties, key: &str) -> Option<u32> {
    let value = match properties.headers().as_ref()?.inner().get(key)? {
        AMQPValue::ShortShortUInt(v) => i64::from(*v),
        AMQPValue::ShortShortInt(v) => i64::from(*v),
        AMQPValue::ShortUInt(v) => i64::from(*v),
        AMQPValue::ShortInt(v) => i64::from(*v),
        AMQPValue::LongUInt(v) => i64::from(*v),
        AMQPValue::LongInt(v) => i64::from(*v),
        AMQPValue::LongLongInt(v) => *v,
        _ => return None,
    };
    u32::try_from(value).ok()
}

/// Because hold delays are capped at [`MAX_HOLD_DELAY`](crate::broker::MAX_HOLD_DELAY),
/// twice a TTL always fits in an `i64`.
fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// An AMQP short string, cut at a character boundary: short strings hold at most 255
/// bytes, and a long job type must not make a publish panic.
fn short(value: &str) -> ShortString {
    let mut end = value.len().min(MAX_SHORT_STRING_LENGTH);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    ShortString::from(&value[..end])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::value::RawValue;

    use super::*;
    use crate::policy::Granularity;
    use crate::text::MARKER_MAX;
    use crate::trace::context::TRACESTATE_MAX;

    fn envelope() -> Envelope {
        let payload = RawValue::from_string("{}".to_owned()).expect("valid json");
        Envelope {
            attempt: 3,
            ..Envelope::new("app::Send", "app.emails", payload)
        }
        .deferred(7)
    }

    #[test]
    fn job_properties_carry_identity_priority_persistence_and_counters() {
        let envelope = envelope();
        let properties = job_properties(&envelope);
        assert_eq!(
            properties.content_type().as_ref().map(ShortString::as_str),
            Some("application/json")
        );
        assert_eq!(*properties.delivery_mode(), Some(2), "jobs are persistent");
        assert_eq!(
            properties.message_id().as_ref().map(ShortString::to_string),
            Some(envelope.job_id.to_string())
        );
        assert_eq!(
            properties.kind().as_ref().map(ShortString::as_str),
            Some("app::Send")
        );
        assert_eq!(*properties.priority(), Some(7));
        assert_eq!(u32_header(&properties, HEADER_ATTEMPT), Some(3));
        assert_eq!(u32_header(&properties, HEADER_DEFERRALS), Some(1));
    }

    #[test]
    fn a_held_job_is_a_job_stamped_with_the_second_it_went_in() {
        let envelope = envelope();
        let now = UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_900);
        let held = held_properties(&envelope, now);
        assert_eq!(*held.timestamp(), Some(1_700_000_000));
        assert_eq!(held.message_id(), job_properties(&envelope).message_id());
        assert_eq!(u32_header(&held, HEADER_ATTEMPT), Some(3));
        assert_eq!(
            *job_properties(&envelope).timestamp(),
            None,
            "only held jobs carry it"
        );
    }

    #[test]
    fn a_jobs_trace_context_goes_out_in_its_headers_and_is_read_back() {
        let trace = TraceContext::from_headers(
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some(b"rojo=1"),
        );
        let envelope = Envelope {
            trace: trace.clone(),
            ..envelope()
        };
        let properties = job_properties(&envelope);
        assert_eq!(trace_context(&properties), trace);
        assert_eq!(
            trace_context(&job_properties(&Envelope {
                trace: None,
                ..envelope
            })),
            None,
            "no context, no headers"
        );
    }

    #[test]
    fn a_traceparent_header_of_another_type_is_no_trace_context() {
        let mut headers = FieldTable::default();
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert(
            TRACEPARENT.into(),
            AMQPValue::ByteArray(valid.as_bytes().into()),
        );
        let properties = BasicProperties::default().with_headers(headers.clone());
        assert_eq!(trace_context(&properties), None);
        headers.insert(TRACEPARENT.into(), AMQPValue::ShortString(valid.into()));
        let properties = BasicProperties::default().with_headers(headers);
        assert!(
            trace_context(&properties).is_some(),
            "a short string is a string"
        );
    }

    #[test]
    fn a_job_type_longer_than_a_short_string_is_cut_at_a_character_boundary() {
        let envelope = Envelope {
            job_type: "é".repeat(200),
            ..envelope()
        };
        let kind = job_properties(&envelope).kind().clone().expect("type set");
        assert_eq!(
            kind.as_str().len(),
            254,
            "cut below 255 bytes without splitting a character"
        );
    }

    #[test]
    fn dead_letter_properties_say_why_and_where_from() {
        let letter = DeadLetterOut {
            queue: "q",
            body: b"raw",
            reason: "fatal error: boom",
            attempts: 2,
            trace: None,
        };
        let properties = dead_letter_properties(&letter);
        assert_eq!(
            string_header(&properties, HEADER_DEATH_REASON).as_deref(),
            Some("fatal error: boom")
        );
        assert_eq!(
            string_header(&properties, HEADER_ORIGINAL_QUEUE).as_deref(),
            Some("q")
        );
        assert_eq!(u32_header(&properties, HEADER_ATTEMPTS), Some(2));
        assert_eq!(
            *properties.delivery_mode(),
            Some(2),
            "dead letters are persistent"
        );
    }

    #[test]
    fn a_huge_dead_letter_reason_is_cut_far_below_the_smallest_frame_size() {
        let reason = format!("no handler for job type `{}`", "x".repeat(200_000));
        let letter = DeadLetterOut {
            queue: "q",
            body: b"raw",
            reason: &reason,
            attempts: 1,
            trace: None,
        };
        let properties = dead_letter_properties(&letter);
        let kept = string_header(&properties, HEADER_DEATH_REASON).expect("a reason");
        assert!(kept.starts_with("no handler for job type `xxx"), "{kept}");
        assert!(
            kept.ends_with(&format!("({} bytes in all)", reason.len())),
            "{kept}"
        );
        assert!(
            kept.len() <= REASON_MAX + MARKER_MAX,
            "{} bytes",
            kept.len()
        );
        // The reason, the queue name, the counters and names, and the trace context.
        let trace = "traceparent".len() + 55 + "tracestate".len() + TRACESTATE_MAX;
        let headers = REASON_MAX + MARKER_MAX + 255 + 64 + trace;
        assert!(
            headers < 4096,
            "all headers fit the smallest frame: {headers} bytes"
        );
    }

    #[test]
    fn a_work_queue_without_priorities_or_ttl_has_no_arguments() {
        let config = QueueConfig {
            max_priority: 0,
            ..QueueConfig::new("q")
        };
        assert!(work_queue_arguments(&config).inner().is_empty());
    }

    #[test]
    fn a_work_queue_ttl_is_rounded_up_to_whole_milliseconds() {
        let config = QueueConfig {
            message_ttl: Some(Duration::from_micros(1500)),
            ..QueueConfig::new("q")
        };
        let arguments = work_queue_arguments(&config);
        assert_eq!(
            arguments.inner().get("x-message-ttl"),
            Some(&AMQPValue::LongLongInt(2))
        );
        assert_eq!(
            arguments.inner().get("x-max-priority"),
            Some(&AMQPValue::ShortShortUInt(10))
        );
    }

    #[test]
    fn a_hold_queue_releases_onto_its_work_queue_and_expires_after_two_delays() {
        let delay = Granularity::new(Duration::from_millis(1))
            .round(Duration::from_millis(250))
            .expect("fits");
        let hold = HoldQueue::for_delay("q", delay);
        let arguments = hold_queue_arguments(&QueueConfig::new("q"), &hold);
        let get = |key: &str| arguments.inner().get(key).cloned();
        assert_eq!(get("x-message-ttl"), Some(AMQPValue::LongLongInt(250)));
        assert_eq!(
            get("x-dead-letter-exchange"),
            Some(AMQPValue::LongString("".into()))
        );
        assert_eq!(
            get("x-dead-letter-routing-key"),
            Some(AMQPValue::LongString("q".into()))
        );
        assert_eq!(get("x-expires"), Some(AMQPValue::LongLongInt(500)));
        assert_eq!(
            get("x-queue-type"),
            None,
            "classic queues are declared as queuey does"
        );
        assert_eq!(get("x-dead-letter-strategy"), None);
    }

    fn quorum(name: &str) -> QueueConfig {
        QueueConfig {
            queue_type: QueueType::Quorum,
            message_ttl: Some(Duration::from_secs(60)),
            ..QueueConfig::new(name)
        }
    }

    fn one_second_hold(queue: &str) -> HoldQueue {
        let delay = Granularity::default().round(Duration::from_secs(1));
        HoldQueue::for_delay(queue, delay.expect("fits"))
    }

    #[test]
    fn every_queue_of_a_quorum_topology_is_a_quorum_queue_without_priority_levels() {
        let config = quorum("q");
        let hold = one_second_hold("q");
        let quorum_type = Some(&AMQPValue::LongString("quorum".into()));
        for arguments in [
            work_queue_arguments(&config),
            dead_letter_queue_arguments(&config),
            hold_queue_arguments(&config, &hold),
        ] {
            assert_eq!(arguments.inner().get("x-queue-type"), quorum_type);
            assert_eq!(arguments.inner().get("x-max-priority"), None);
        }
        assert_eq!(
            work_queue_arguments(&config).inner().get("x-message-ttl"),
            Some(&AMQPValue::LongLongInt(60_000)),
            "quorum queues keep their message TTL"
        );
    }

    #[test]
    fn a_quorum_hold_queue_dead_letters_at_least_once_and_rejects_publishes_when_full() {
        let config = quorum("q");
        let hold = one_second_hold("q");
        let arguments = hold_queue_arguments(&config, &hold);
        let get = |key: &str| arguments.inner().get(key).cloned();
        assert_eq!(
            get("x-dead-letter-strategy"),
            Some(AMQPValue::LongString("at-least-once".into()))
        );
        assert_eq!(
            get("x-overflow"),
            Some(AMQPValue::LongString("reject-publish".into())),
            "RabbitMQ dead-letters at-most-once without it"
        );
        assert_eq!(
            get("x-expires"),
            Some(AMQPValue::LongLongInt(2_000 + 600_000)),
            "a quorum hold queue outlives a failover with messages in it"
        );
        let longest = HoldQueue::longest("q");
        assert_eq!(
            hold_queue_arguments(&config, &longest)
                .inner()
                .get("x-expires"),
            Some(&AMQPValue::LongLongInt(i64::from(u32::MAX))),
            "never more than RabbitMQ accepts"
        );
    }

    #[test]
    fn a_quorum_queue_is_declared_durable_whatever_the_config_says() {
        let config = QueueConfig {
            durable: false,
            ..quorum("q")
        };
        assert!(declare_options(&config).durable);
        let classic = QueueConfig {
            durable: false,
            ..QueueConfig::new("q")
        };
        assert!(!declare_options(&classic).durable);
    }
}
