//! Recorded attempts on the real broker (docs/replay.md): two `jobhost run` hosts on one
//! virtual host; a job that fails on the payment service is recorded into
//! `jobhost.recordings` by whichever host ran it and replays through either host's API,
//! with garbage a plain AMQP client put beside it skipped and nothing taken off the queue
//! by a lookup; and a recordings queue someone else declared without the host's retention
//! is used as it is.

use std::time::{Duration, Instant};

use jobhost::broker::{KeptRecording, RECORDING_JSON_MAX, RECORDINGS_QUEUE, Recordings as _};
use jobhost::job::Recording;
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;

use crate::support::cli::{Host, PROCESSING, STARTUP, json_of, logged_id};
use crate::support::payments::{ALREADY, API_KEY, Service, workspace};
use crate::support::{Vhost, backend, raw_channel_at, ready, unique};

/// `jobhost run --amqp URL` in a project directory of its own granting `replayable` the
/// service at `origin`, once it consumes the plugin's queue.
fn start_host(url: &str, origin: &str) -> Host {
    let host = Host::in_project(workspace(origin), &["--amqp", url]);
    host.wait_for_line(STARTUP, |l| {
        l.contains("consuming") && l.contains("queue=test.replayable")
    });
    host
}

/// `jobhost replay ARGS --admin HOST`, in the host's project directory.
fn replay(host: &Host, args: &[&str]) -> String {
    host.cli_ok_in(host.plugin_dir(), &[&["replay"], args].concat())
}

/// Publish `body` to the recordings queue with `message_id`, as any AMQP client can.
async fn publish(channel: &lapin::Channel, body: &[u8], message_id: Option<&str>) {
    let mut properties = BasicProperties::default();
    if let Some(id) = message_id {
        properties = properties.with_message_id(id.into());
    }
    channel
        .basic_publish(
            "".into(),
            RECORDINGS_QUEUE.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("a publish")
        .await
        .expect("a confirm or ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_on_the_broker_replays_through_either_host_and_garbage_beside_it_is_skipped() {
    if backend(&unique("replay-probe")).await.is_none() {
        return;
    }
    let vhost = Vhost::new("replay");
    let service = Service::start();
    let origin = service.origin.clone();
    let (a, b) = (
        start_host(&vhost.url, &origin),
        start_host(&vhost.url, &origin),
    );

    let payload = format!(r#"{{"url": "{origin}", "order": "o-17"}}"#);
    let enqueued = json_of(&a.cli(&["enqueue", "replay.Charge", &payload, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    let dead = |host: &Host| {
        (host.log_lines().iter())
            .any(|l| l.contains(logged_id(&job_id)) && l.contains("job dead-lettered"))
    };
    let began = Instant::now();
    while !dead(&a) && !dead(&b) {
        assert!(
            began.elapsed() < PROCESSING,
            "the job is dead-lettered by one host"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    service.stop();

    // Whichever host ran it, the recording is the broker's: both hosts' APIs have it.
    let channel = raw_channel_at(&vhost.url).await;
    let began = Instant::now();
    while ready(&channel, RECORDINGS_QUEUE).await == 0 {
        assert!(
            began.elapsed() < PROCESSING,
            "the recording reaches the broker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for host in [&a, &b] {
        let replayed = replay(host, &[&job_id]);
        assert!(
            replayed.contains("verdict: still fails, same reason") && replayed.contains(ALREADY),
            "the replay through {} gives the recorded reason:\n{replayed}",
            host.admin
        );
    }

    // Garbage beside it, from a plain AMQP client: not JSON under the job's id, another
    // job's recording under the job's id, a recording of the job too large for any host to
    // have written, and messages without an id.
    let saved = a.plugin_dir().join("saved.json");
    replay(&a, &[&job_id, "--save", saved.to_str().expect("UTF-8")]);
    let mut other: Recording =
        serde_json::from_slice(&std::fs::read(&saved).expect("saved")).expect("a recording");
    assert!(
        !serde_json::to_string(&other)
            .expect("JSON")
            .contains(API_KEY)
    );
    let mut oversized = other.clone();
    oversized.outcome.reason = Some("oversized".into());
    oversized.job.payload = format!(r#""{}""#, "x".repeat(RECORDING_JSON_MAX));
    other.job.job_id = uuid::Uuid::new_v4();
    other.outcome.reason = Some("forged".into());
    channel
        .confirm_select(Default::default())
        .await
        .expect("confirms");
    publish(&channel, b"\xff not json", Some(&job_id)).await;
    publish(
        &channel,
        &serde_json::to_vec(&other).expect("JSON"),
        Some(&job_id),
    )
    .await;
    publish(
        &channel,
        &serde_json::to_vec(&oversized).expect("JSON"),
        Some(&job_id),
    )
    .await;
    for _ in 0..20 {
        publish(&channel, b"{}", None).await;
    }
    let before = ready(&channel, RECORDINGS_QUEUE).await;
    let replayed = replay(&b, &[&job_id]);
    assert!(
        replayed.contains(ALREADY)
            && !replayed.contains("forged")
            && !replayed.contains("oversized"),
        "the lookup keeps the job's own recording only:\n{replayed}"
    );
    assert_eq!(
        ready(&channel, RECORDINGS_QUEUE).await,
        before,
        "a lookup takes nothing off the queue"
    );
    let served = a.cli(&["plugins", "--json"]);
    assert!(served.status.success(), "the host still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recordings_queue_declared_by_someone_else_is_used_as_it_is() {
    let Some(_) = backend(&unique("replay-squat-probe")).await else {
        return;
    };
    let vhost = Vhost::new("replay-squat");
    let channel = raw_channel_at(&vhost.url).await;
    channel
        .queue_declare(
            RECORDINGS_QUEUE.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("someone declares it first, without arguments");
    let host = vhost.backend("replay-squat").await;
    let recording: Recording = serde_json::from_value(serde_json::json!({
        "format": 1,
        "job": {
            "job_id": "0b6f6a52-5f4e-4e9b-9c3a-2d9d2b6f1c11", "job_type": "t.T", "queue": "q",
            "attempt": 1, "max_attempts": 1, "deferrals": 0, "priority": 0, "age_ms": 0,
            "timeout_ms": 1000, "payload": "{}"
        },
        "plugin": {"name": "p", "sha256": "00"},
        "recorded_at_ms": 0,
        "outcome": {"kind": "fatal", "reason": "no"},
        "seeds": {"secure": "", "insecure": "", "insecure_seed": ""},
        "imports": [],
        "log": []
    }))
    .expect("a recording");
    host.keep_recording(&KeptRecording::of(&recording).expect("a small recording"))
        .await
        .expect("kept in the queue as it is");
    let found = host
        .recordings_of(&[recording.job.job_id])
        .await
        .expect("a lookup");
    assert_eq!(found, [recording]);
}
