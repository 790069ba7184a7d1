//! Trace context across jobs on RabbitMQ: a message published by a plain AMQP client with a
//! W3C `traceparent` header is handled in that trace, its retry stays in it, and the
//! follow-up it enqueues carries it with the job's span as parent; hostile trace headers
//! start a fresh trace and never reach a log line.
//!
//! The guest's log lines are captured through a global JSON subscriber, since the worker's
//! tasks run on the runtime's threads; each test finds its own lines by the job's key.

mod support;

use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};
use support::worker::{Running, fixture_queues};
use support::{Cleanup, PATIENCE, amqp_url, backend, unique};

/// Held by each test of this file: the `scripted` plugin consumes fixed queue names.
static FIXTURE_QUEUES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SCRIPTED_QUEUES: &[&str] = &["test.emails", "test.bare", "test.jittered", "test.urgent"];

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

/// Every JSON log line of this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The binary's capture, installed as the global subscriber on first use.
    fn global() -> &'static Self {
        static CAPTURED: OnceLock<Captured> = OnceLock::new();
        CAPTURED.get_or_init(|| {
            let captured = Self::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("the only global subscriber of this binary");
            captured
        })
    }

    fn lines(&self) -> Vec<String> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes)
            .expect("the JSON formatter writes UTF-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The guest's `scripted call` lines of the job keyed `key`, in order.
    fn scripted_calls(&self, key: &str) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|line| serde_json::from_str::<Value>(line).expect("each line is JSON"))
            .filter(|event| {
                event["target"] == "jobhost::guest"
                    && event["fields"]["message"] == "scripted call"
                    && event["fields"]["fields"]
                        .as_str()
                        .is_some_and(|fields| fields.contains(&format!("key={key:?}")))
            })
            .collect()
    }
}

/// The job's envelope as any producer would write it.
fn envelope(job_type: &str, queue: &str, script: Value) -> Vec<u8> {
    json!({
        "job_id": uuid::Uuid::new_v4(),
        "job_type": job_type,
        "queue": queue,
        "attempt": 1,
        "enqueued_at_ms": 0,
        "payload": script,
    })
    .to_string()
    .into_bytes()
}

/// Publish `body` to `queue` with `headers`, by lapin alone, confirmed.
async fn publish_with_headers(channel: &Channel, queue: &str, body: &[u8], headers: FieldTable) {
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_headers(headers);
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("basic.publish")
        .await
        .expect("the broker takes the message");
}

/// The first message to arrive on `queue`, taken off it, waiting for the queue to be
/// declared too; fails the test after [`PATIENCE`]. A channel per look, because asking for
/// a queue that does not exist yet closes the channel.
async fn take_within(connection: &Connection, queue: &str) -> Delivery {
    let what = format!("a message on `{queue}`");
    support::within(PATIENCE, &what, async {
        loop {
            let channel = connection.create_channel().await.expect("a channel");
            let get = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true });
            if let Ok(Some(message)) = get.await {
                return message.delivery;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_message_is_handled_retried_and_followed_up_in_its_trace() {
    let captured = Captured::global();
    let _queues = FIXTURE_QUEUES.lock().await;
    let _cleanup = fixture_queues(SCRIPTED_QUEUES);
    let _holds = Cleanup::new(&["test.emails.deferred.1000", "test.bare.deferred.60000"]);
    let Some(backend) = backend(&unique("traced")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "scripted").await;
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("a test connection");
    let channel = connection.create_channel().await.expect("a channel");
    let key = unique("traced-job");
    let script = json!({"key": key, "fail_times": 1, "follow_up_after_ms": 60_000});
    let traceparent = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    publish_with_headers(
        &channel,
        "test.emails",
        &envelope("scripted.SendEmail", "test.emails", script),
        headers(vec![
            ("traceparent", long(&traceparent)),
            ("tracestate", long("vendor=opaque")),
        ]),
    )
    .await;

    let follow_up = take_within(&connection, "test.bare.deferred.60000").await;
    running.stop().await;

    let calls = captured.scripted_calls(&key);
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

/// One hostile `traceparent` per job: garbage, 10 KB, the wrong AMQP types, uppercase.
fn hostile_traceparents() -> Vec<(&'static str, AMQPValue)> {
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
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_trace_headers_start_a_fresh_trace_and_never_reach_a_log_line() {
    let captured = Captured::global();
    let _queues = FIXTURE_QUEUES.lock().await;
    let _cleanup = fixture_queues(SCRIPTED_QUEUES);
    let Some(backend) = backend(&unique("hostile-trace")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "scripted").await;
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("a test connection");
    let channel = connection.create_channel().await.expect("a channel");
    let run = unique("hostile");
    let cases = hostile_traceparents();
    for (case, value) in &cases {
        // Fatal on its one attempt, so its dead letter shows what the host passed on.
        let script = json!({"key": format!("{run}.{case}"), "fail_times": 1, "failure": "fatal"});
        let huge_state = long(&"k=v,".repeat(2560));
        publish_with_headers(
            &channel,
            "test.bare",
            &envelope("scripted.BareJob", "test.bare", script),
            headers(vec![
                ("traceparent", value.clone()),
                ("tracestate", huge_state),
            ]),
        )
        .await;
    }
    let mut letters = Vec::new();
    for _ in &cases {
        letters.push(take_within(&connection, "test.bare.dead").await);
    }
    running.stop().await;

    let mut trace_ids = Vec::new();
    for (case, _) in &cases {
        let calls = captured.scripted_calls(&format!("{run}.{case}"));
        assert_eq!(calls.len(), 1, "`{case}` ran once: {calls:?}");
        let trace_id = field(&calls[0], "trace_id");
        assert_ne!(
            trace_id, TRACE_ID,
            "`{case}` is not read as the trace it mimics"
        );
        assert!(
            trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit()),
            "`{case}` runs in a fresh trace: {trace_id}"
        );
        trace_ids.push(trace_id.to_owned());
    }
    for letter in &letters {
        let traceparent = string_header(&letter.properties, "traceparent")
            .expect("a dead letter carries its trace");
        assert!(
            trace_ids.iter().any(|id| traceparent.contains(id.as_str())),
            "the dead letter is in its job's fresh trace: {traceparent}"
        );
        assert_eq!(
            string_header(&letter.properties, "tracestate"),
            None,
            "a state without a valid parent, and an oversized one, are dropped"
        );
    }
    for line in captured.lines() {
        assert!(
            !line.contains("not a trace")
                && !line.contains("xxxxxxxx")
                && !line.contains("k=v,k=v"),
            "no log line repeats a hostile header: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_tracestate_is_dropped_and_its_valid_traceparent_kept() {
    let _captured = Captured::global();
    let _queues = FIXTURE_QUEUES.lock().await;
    let _cleanup = fixture_queues(SCRIPTED_QUEUES);
    let Some(backend) = backend(&unique("big-state")).await.map(Arc::new) else {
        return;
    };
    let running = Running::start(backend.clone(), "scripted").await;
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("a test connection");
    let channel = connection.create_channel().await.expect("a channel");
    let script = json!({"key": unique("big-state"), "fail_times": 1, "failure": "fatal"});
    let traceparent = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    publish_with_headers(
        &channel,
        "test.bare",
        &envelope("scripted.BareJob", "test.bare", script),
        headers(vec![
            ("traceparent", long(&traceparent)),
            ("tracestate", long(&"k=v,".repeat(2560))),
        ]),
    )
    .await;
    let letter = take_within(&connection, "test.bare.dead").await;
    running.stop().await;
    assert_eq!(
        string_header(&letter.properties, "traceparent"),
        Some(traceparent),
        "a dead letter keeps the trace context it came with, so it can be found by trace id"
    );
    assert_eq!(string_header(&letter.properties, "tracestate"), None);
}
