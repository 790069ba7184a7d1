//! OTLP export (feature `otlp`): a job's span reaches a collector in the trace of the
//! message's `traceparent`, as a child of the sender's span, with the span id a follow-up
//! names as its parent.
//!
//! Run with `cargo test -p jobhost --features otlp --test otlp_export`. The collector is
//! an axum route started by the test, on a loopback port of its own; spans are checked in
//! the protobuf bytes, where ids are their raw bytes.
#![cfg(feature = "otlp")]

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use jobhost::broker::Backend;
use jobhost::envelope::Envelope;
use jobhost::job::{FollowUp, JobSpec, Manifest, Outcome};
use jobhost::testing::{Harness, native_unit};
use jobhost::trace::TraceContext;
use jobhost::trace::otlp::OtlpExport;
use jobhost::worker::WorkerConfig;
use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;
use tracing_subscriber::layer::SubscriberExt;

use crate::support::cli;

const TRACEPARENT: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Bodies of `POST /v1/traces`, as received.
type Received = Arc<Mutex<Vec<Bytes>>>;

async fn collector() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(|State(received): State<Received>, body: Bytes| async move {
                received
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(body);
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

fn manifest() -> Manifest {
    Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: "traced".into(),
        queues: vec![QueueConfig::new("q")],
        jobs: vec![JobSpec {
            name: "traced.Job".into(),
            queue: "q".into(),
            retry: None,
            timeout: None,
        }],
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_span_is_exported_in_the_incoming_trace_under_the_senders_span() {
    let (endpoint, received) = collector().await;
    let export = OtlpExport::start(&endpoint, tokio::runtime::Handle::current())
        .expect("an http endpoint is accepted");
    let subscriber = tracing_subscriber::registry().with(export.layer());
    tracing::subscriber::set_global_default(subscriber).expect("the binary's only subscriber");
    // The first job enqueues a follow-up, which the same handler runs without one.
    let unit = native_unit("traced", manifest(), |job| Outcome::Completed {
        follow_ups: (job.payload == b"\"first\"")
            .then(|| FollowUp {
                job_id: uuid::Uuid::new_v4(),
                job_type: "traced.Job".into(),
                payload: RawValue::from_string("\"second\"".into()).expect("JSON"),
                delay: None,
                batch: None,
            })
            .into_iter()
            .collect(),
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    let incoming = TraceContext::from_headers(TRACEPARENT, None).expect("valid");
    let payload = RawValue::from_string("\"first\"".into()).expect("JSON");
    let first = Envelope {
        trace: Some(incoming.clone()),
        ..Envelope::new("traced.Job", "q", payload)
    };
    h.backend.publish(&first, None).await.expect("publish");
    h.run_until_idle().await;
    let follow_up = h
        .backend
        .acked("q")
        .into_iter()
        .find(|envelope| envelope.job_id != first.job_id)
        .expect("the follow-up ran");
    let follow_up_parent = follow_up.trace.expect("the follow-up is traced").parent;
    h.shutdown().await;
    let flushed = export.clone();
    tokio::task::spawn_blocking(move || flushed.shutdown())
        .await
        .expect("the flush does not panic");

    let all = received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .concat();
    assert!(
        contains(&all, &incoming.parent.trace_id.to_bytes()),
        "the job's span reached the collector in the incoming trace"
    );
    assert_eq!(follow_up_parent.trace_id, incoming.parent.trace_id);
    assert!(
        contains(&all, &incoming.parent.parent_id.to_bytes()),
        "the sender's span is the first job's parent"
    );
    assert!(
        contains(&all, &follow_up_parent.parent_id.to_bytes()),
        "the span the follow-up names as its parent is the exported span"
    );
    assert!(
        contains(&all, first.job_id.to_string().as_bytes()),
        "the span names the job"
    );
    assert!(
        contains(&all, b"traced.Job"),
        "the span is named after the job type"
    );
}

#[test]
fn jobhost_run_with_an_otlp_endpoint_exports_the_span_of_each_job_it_runs() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (endpoint, received) = runtime.block_on(collector());
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("scripted"),
        dir.path().join("scripted.wasm"),
    )
    .expect("the fixture copies");
    let mut command = cli::jobhost();
    command
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .args(["--otlp-endpoint", &endpoint]);
    let mut host = cli::Host::spawn(command, dir, cli::STARTUP);
    let traceparent = std::str::from_utf8(TRACEPARENT).expect("ASCII");
    let payload = r#"{"key": "exported@example.com"}"#;
    let output = host.cli(&[
        "enqueue",
        "scripted.SendEmail",
        payload,
        "--traceparent",
        traceparent,
    ]);
    cli::stdout_of(&output);
    host.wait_for_line(cli::PROCESSING, |l| l.contains("job completed"));
    assert!(
        host.interrupt(cli::PROCESSING).success(),
        "the host exits cleanly, flushing its spans"
    );
    let all = received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .concat();
    let incoming = TraceContext::from_headers(TRACEPARENT, None).expect("valid");
    assert!(
        contains(&all, &incoming.parent.trace_id.to_bytes()),
        "the job's span reached the collector in the trace `--traceparent` named"
    );
    assert!(
        contains(&all, b"scripted@"),
        "the span names the plugin and its version"
    );
}

#[test]
fn only_plain_http_endpoints_are_accepted() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let err = OtlpExport::start("https://collector:4318", runtime.handle().clone())
        .expect_err("https is refused");
    assert!(err.to_string().contains("only plain `http://`"), "{err}");
}
