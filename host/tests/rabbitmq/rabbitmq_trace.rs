//! Trace context across jobs on RabbitMQ: a message published by a plain AMQP client with a
//! W3C `traceparent` header is handled in that trace, its retry stays in it, and the
//! follow-up it enqueues carries it with the job's span as parent; hostile trace headers
//! start a fresh trace and never reach a log line.
//!
//! The guest's log lines are captured as JSON by a subscriber of each test's own, set on
//! every thread of the test's runtime (`Captured::run`), since the worker's tasks run on
//! those threads; other tests of the binary log elsewhere.

use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicGetOptions;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

use crate::support;
use crate::support::capture::Captured;
use crate::support::worker::{FixtureQueues, Running, fixture_queues};
use crate::support::{PATIENCE, amqp_url, backend, publish_with_headers, unique};

/// The `scripted` plugin's queues, and the hold queues of the tests' retry and follow-up.
const SCRIPTED_QUEUES: &[&str] = &[
    "test.emails",
    "test.bare",
    "test.jittered",
    "test.urgent",
    "test.emails.deferred.1000",
    "test.bare.deferred.60000",
];

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

/// A worker running the `scripted` fixture on the test broker, and a plain AMQP
/// connection of the test's own.
struct Scripted {
    running: Running,
    connection: Connection,
    channel: Channel,
    _queues: FixtureQueues,
}

impl Scripted {
    /// `None` when the broker tests are skipped.
    async fn start(name: &str) -> Option<Self> {
        let queues = fixture_queues(SCRIPTED_QUEUES).await;
        let backend = Arc::new(backend(&unique(name)).await?);
        let running = Running::start(backend, "scripted").await;
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("a test connection");
        let channel = connection.create_channel().await.expect("a channel");
        Some(Self {
            running,
            connection,
            channel,
            _queues: queues,
        })
    }

    /// Publish a `scripted` job with `headers`, as any AMQP client would.
    async fn publish(&self, job_type: &str, queue: &str, script: Value, headers: FieldTable) {
        let body = json!({
            "job_id": uuid::Uuid::new_v4(),
            "job_type": job_type,
            "queue": queue,
            "attempt": 1,
            "enqueued_at_ms": 0,
            "payload": script,
        });
        publish_with_headers(&self.channel, queue, body.to_string().as_bytes(), headers).await;
    }

    /// The first message to arrive on `queue`, taken off it, waiting for the queue to be
    /// declared too; fails the test after [`PATIENCE`]. A channel per look, because asking
    /// for a queue that does not exist yet closes the channel.
    async fn take(&self, queue: &str) -> Delivery {
        let what = format!("a message on `{queue}`");
        support::within(PATIENCE, &what, async {
            loop {
                let channel = self.connection.create_channel().await.expect("a channel");
                let get = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true });
                if let Ok(Some(message)) = get.await {
                    return message.delivery;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

/// The guest's `scripted call` lines of the job keyed `key`, in order.
fn scripted_calls(captured: &Captured, key: &str) -> Vec<Value> {
    captured
        .guest_events()
        .into_iter()
        .filter(|event| {
            event["fields"]["message"] == "scripted call"
                && event["fields"]["fields"]
                    .as_str()
                    .is_some_and(|fields| fields.contains(&format!("key={key:?}")))
        })
        .collect()
}

fn headers(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert(key.into(), value);
    }
    table
}

fn long(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text))
}

fn string_header(properties: &BasicProperties, key: &str) -> Option<String> {
    match properties.headers().as_ref()?.inner().get(key)? {
        AMQPValue::LongString(value) => Some(value.to_string()),
        other => panic!("`{key}` is not a long string: {other:?}"),
    }
}

fn field<'a>(event: &'a Value, name: &str) -> &'a str {
    event["fields"][name]
        .as_str()
        .unwrap_or_else(|| panic!("a `{name}` field in {event}"))
}

#[test]
fn a_traced_message_is_handled_retried_and_followed_up_in_its_trace() {
    Captured::run(a_traced_message_is_handled_retried_and_followed_up_in_its_trace_with);
}

async fn a_traced_message_is_handled_retried_and_followed_up_in_its_trace_with(captured: Captured) {
    let captured = &captured;
    let Some(scripted) = Scripted::start("traced").await else {
        return;
    };
    let key = unique("traced-job");
    let script = json!({"key": key, "fail_times": 1, "follow_up_after_ms": 60_000});
    let traceparent = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    let trace_headers = headers(vec![
        ("traceparent", long(&traceparent)),
        ("tracestate", long("vendor=opaque")),
    ]);
    scripted
        .publish("scripted.SendEmail", "test.emails", script, trace_headers)
        .await;
    let follow_up = scripted.take("test.bare.deferred.60000").await;
    scripted.stop().await;

    let calls = scripted_calls(captured, &key);
    assert_eq!(calls.len(), 2, "a failed attempt and its retry: {calls:?}");
    for call in &calls {
        assert_eq!(
            field(call, "trace_id"),
            TRACE_ID,
            "each attempt's log line carries the incoming trace id: {call}"
        );
    }
    let (first_span, second_span) = (field(&calls[0], "span_id"), field(&calls[1], "span_id"));
    assert_ne!(
        first_span, second_span,
        "each attempt has a span of its own"
    );
    assert_ne!(
        first_span, SENDER_SPAN,
        "the sender's span is the parent, not the job's"
    );
    assert_eq!(
        string_header(&follow_up.properties, "traceparent"),
        Some(format!("00-{TRACE_ID}-{second_span}-01")),
        "the follow-up is in the same trace, a child of the attempt that enqueued it"
    );
    assert_eq!(
        string_header(&follow_up.properties, "tracestate").as_deref(),
        Some("vendor=opaque"),
        "the tracestate rides along"
    );
}

/// One `traceparent` per job: hostile ones (garbage, 10 KB, the wrong AMQP types,
/// uppercase), and, last, a valid one, each with a 10 KB `tracestate`.
fn traceparents() -> Vec<(&'static str, AMQPValue)> {
    let valid = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    vec![
        ("garbage", long("garbage \n\u{1b}[2J not a trace")),
        (
            "ten-kilobytes",
            long(&format!("{valid}-{}", "x".repeat(10 * 1024))),
        ),
        ("an-integer", AMQPValue::LongLongInt(42)),
        (
            "an-array",
            AMQPValue::FieldArray(FieldArray::from(vec![long(&valid)])),
        ),
        (
            "a-table",
            AMQPValue::FieldTable(headers(vec![("traceparent", long(&valid))])),
        ),
        (
            "bytes",
            AMQPValue::ByteArray(valid.as_bytes().to_vec().into()),
        ),
        (
            "not-utf8",
            AMQPValue::LongString(LongString::from(vec![0xff; 55])),
        ),
        ("uppercase", long(&valid.to_uppercase())),
        ("valid", long(&valid)),
    ]
}

#[test]
fn hostile_trace_headers_start_a_fresh_trace_and_never_reach_a_log_line() {
    Captured::run(hostile_trace_headers_start_a_fresh_trace_and_never_reach_a_log_line_with);
}

async fn hostile_trace_headers_start_a_fresh_trace_and_never_reach_a_log_line_with(
    captured: Captured,
) {
    let captured = &captured;
    let Some(scripted) = Scripted::start("hostile-trace").await else {
        return;
    };
    let run = unique("hostile");
    let cases = traceparents();
    for (case, value) in &cases {
        // Fatal on its one attempt, so its dead letter shows what the host passed on.
        let script = json!({"key": format!("{run}.{case}"), "fail_times": 1, "failure": "fatal"});
        let trace_headers = headers(vec![
            ("traceparent", value.clone()),
            ("tracestate", long(&"k=v,".repeat(2560))),
        ]);
        scripted
            .publish("scripted.BareJob", "test.bare", script, trace_headers)
            .await;
    }
    let mut letters = Vec::new();
    for _ in &cases {
        letters.push(scripted.take("test.bare.dead").await);
    }
    scripted.stop().await;

    let mut trace_ids = Vec::new();
    for (case, _) in &cases {
        let calls = scripted_calls(captured, &format!("{run}.{case}"));
        assert_eq!(calls.len(), 1, "`{case}` ran once: {calls:?}");
        let trace_id = field(&calls[0], "trace_id");
        assert_eq!(trace_id.len(), 32, "`{case}` runs in a trace: {trace_id}");
        assert_eq!(
            trace_id == TRACE_ID,
            *case == "valid",
            "only the valid header is read as the trace it names; `{case}` runs in {trace_id}"
        );
        trace_ids.push(trace_id.to_owned());
    }
    for letter in &letters {
        let traceparent = string_header(&letter.properties, "traceparent")
            .expect("a dead letter carries its trace");
        assert!(
            trace_ids.iter().any(|id| traceparent.contains(id.as_str())),
            "the dead letter is in its job's trace: {traceparent}"
        );
        assert_eq!(
            string_header(&letter.properties, "tracestate"),
            None,
            "an oversized tracestate is dropped, and one without a valid parent with it"
        );
    }
    let valid = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    assert!(
        letters
            .iter()
            .any(|letter| string_header(&letter.properties, "traceparent") == Some(valid.clone())),
        "a dead letter keeps the valid trace context it came with, so it can be found by it"
    );
    for line in captured.lines() {
        assert!(
            !line.contains("not a trace")
                && !line.contains("xxxxxxxx")
                && !line.contains("k=v,k=v"),
            "no log line repeats a hostile header: {line}"
        );
    }
}
