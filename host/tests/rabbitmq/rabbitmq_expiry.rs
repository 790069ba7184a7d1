//! Expiring jobs on the real broker: every `expires_at_ms` a plain AMQP client may write
//! ends as the envelope's doc says, on one connection, while the jobs behind it run; and
//! `jobhost enqueue --expires-in` straight to the broker writes the deadline.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use jobhost::broker::Backend;
use jobhost::envelope::Envelope;
use jobhost::job::Outcome;
use jobhost::testing::native_unit;
use jobhost::worker::Plugins;
use jobhost_sdk::QueueConfig;

use crate::support::cli;
use crate::support::worker::{one_job, serve_until};
use crate::support::{
    Cleanup, PATIENCE, amqp_url, backend, connections_named, publish_plainly, raw_channel, ready,
    skip_requested, take, take_death_reasons, unique, within,
};

/// The keys of the jobs the handler ran, across the test.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

/// An envelope's JSON as any producer may write it, `expires_at_ms` as given (omitted for
/// `None`), keyed `key`.
fn body(queue: &str, key: &str, expires_at_ms: Option<&str>) -> Vec<u8> {
    let expiry = expires_at_ms
        .map(|value| format!(r#","expires_at_ms":{value}"#))
        .unwrap_or_default();
    format!(
        r#"{{"job_id":"{}","job_type":"expiry.Job","queue":"{queue}","attempt":1,"enqueued_at_ms":{},"payload":{{"key":"{key}"}}{expiry}}}"#,
        uuid::Uuid::new_v4(),
        now_ms()
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_expiry_a_producer_may_write_ends_as_stated_while_the_host_keeps_serving() {
    let connection_name = unique("expiry");
    let Some(backend) = backend(&connection_name).await.map(Arc::new) else {
        return;
    };
    let name = unique("expiry");
    let _cleanup = Cleanup::new(&[&name]);
    let queue = QueueConfig::new(&name);
    let manifest = one_job("expiry", &queue, "expiry.Job");
    let plugins = Plugins::new();
    plugins
        .install(native_unit("expiry", manifest, |job| {
            let payload: serde_json::Value = serde_json::from_slice(job.payload).expect("json");
            let key = payload["key"].as_str().unwrap_or_default().to_owned();
            RAN.lock().expect("the record").push(key);
            Outcome::Completed { follow_ups: vec![] }
        }))
        .expect("installed");
    backend.declare(&queue).await.expect("declared");
    let channel = raw_channel().await;
    let minute_ago = (now_ms() - 60_000).to_string();
    let in_a_year = (now_ms() + 365 * 86_400_000).to_string();
    let u64_max = u64::MAX.to_string();
    let cases: [(&str, Option<&str>); 8] = [
        ("a minute ago", Some(&minute_ago)),
        ("in a year", Some(&in_a_year)),
        ("zero", Some("0")),
        ("u64 max", Some(&u64_max)),
        ("null", Some("null")),
        ("a string", Some(r#""soon""#)),
        ("negative", Some("-1")),
        ("past u64 max", Some("18446744073709551616")),
    ];
    for (key, expiry) in cases {
        publish_plainly(&channel, &name, &body(&name, key, expiry)).await;
    }
    const ORDINARY: usize = 50;
    for n in 0..ORDINARY {
        publish_plainly(
            &channel,
            &name,
            &body(&name, &format!("ordinary {n}"), None),
        )
        .await;
    }

    let dead = format!("{name}.dead");
    serve_until(
        Arc::clone(&backend),
        plugins,
        PATIENCE * 3,
        "five dead letters and an empty queue",
        || async {
            ready(&channel, &dead).await == 5
                && ready(&channel, &name).await == 0
                && RAN.lock().expect("the record").len() == 3 + ORDINARY
        },
    )
    .await;

    let mut ran = RAN.lock().expect("the record").clone();
    ran.retain(|key| !key.starts_with("ordinary"));
    ran.sort();
    assert_eq!(
        ran,
        ["in a year", "null", "u64 max"],
        "a deadline to come, one that never comes, and none, run"
    );
    let reasons = take_death_reasons(&channel, &name).await;
    let (expired, malformed): (Vec<&String>, Vec<&String>) = reasons
        .iter()
        .partition(|reason| reason.starts_with("expired: delivered at "));
    assert_eq!(
        malformed, ["malformed envelope"; 3],
        "a string, a negative number and one past u64::MAX are malformed"
    );
    let deadline_zero = "after its deadline 1970-01-01T00:00:00Z";
    let (zero, late): (Vec<&String>, Vec<&String>) = expired
        .into_iter()
        .partition(|reason| reason.ends_with(deadline_zero));
    assert_eq!(zero.len(), 1, "0 is a deadline long past: {reasons:?}");
    assert!(
        late.len() == 1 && late[0].contains(", 1m"),
        "a minute ago is a minute late: {late:?}"
    );
    assert_eq!(
        connections_named(&connection_name).len(),
        1,
        "one connection throughout: the broker never closed it"
    );
}

#[test]
fn jobhost_enqueue_expires_in_straight_to_the_broker_writes_the_deadline() {
    if skip_requested() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let name = unique("expiry-cli");
    let _cleanup = Cleanup::new(&[&name]);
    let before = now_ms();
    let output = cli::jobhost()
        .args(["enqueue", "expiry.Job", r#"{"n":1}"#, "--queue", &name])
        .args(["--amqp", &amqp_url(), "--expires-in", "10m", "--json"])
        .output()
        .expect("jobhost runs");
    let after = now_ms();
    let enqueued = cli::json_of(&output);
    let expires_at_ms = enqueued["expires_at_ms"].as_u64().expect("an expiry");
    assert!(
        (before + 600_000..=after + 600_000).contains(&expires_at_ms),
        "ten minutes after the enqueue: {expires_at_ms}, enqueued between {before} and {after}"
    );
    let message = runtime.block_on(async {
        let channel = raw_channel().await;
        within(PATIENCE, "the enqueued job", take(&channel, &name)).await
    });
    let envelope = Envelope::decode(&message.expect("on the queue").data).expect("an envelope");
    assert_eq!(
        envelope.expires_at_ms.map(|deadline| deadline.epoch_ms()),
        Some(expires_at_ms),
        "the message carries the deadline the command printed"
    );
    assert_eq!(
        enqueued["job_id"].as_str(),
        Some(envelope.job_id.to_string().as_str())
    );
}
