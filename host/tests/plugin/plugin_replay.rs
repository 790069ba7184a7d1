//! Recording an attempt and replaying it offline (docs/replay.md), with the `replayable`
//! fixture against a payment service the test starts: what a recording holds and never
//! holds, a replay with the service gone that gives the same outcome and the same log
//! lines (randomness, clock and follow-up id included), a fixed version that now
//! completes, a version that calls another URL reported as diverged at that call, and a
//! recording's bound against a handler that reads far more than it.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use jobhost::grants::Grants;
use jobhost::job::recording::{ConfigAnswer, Import, RECORDING_MAX_BYTES};
use jobhost::job::{Invocation, Outcome, Record, Recorder, Recording};
use jobhost::plugin::{Engine, EngineConfig, Plugin};
use jobhost_sdk::JobError;

use crate::support::outbound::GIB;
use crate::support::plugin::{fixture, invocation, test_config, try_load};

/// The secret the grants give `api_key`; no recording may hold it.
const API_KEY: &str = "sk_live_0123456789abcdef";

/// What the payment service says to a charge it already took.
const ALREADY: &str = "already charged: order o-17 on 2026-12-07";

/// Keeps what it is handed.
#[derive(Debug, Default)]
struct Kept(Mutex<Vec<Recording>>);

impl Recorder for Kept {
    fn keep(&self, recording: Recording) {
        self.0.lock().expect("not poisoned").push(recording);
    }
}

impl Kept {
    fn taken(&self) -> Vec<Recording> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

/// A payment service: `POST /charge` answers `500` [`ALREADY`], `POST /v2/charge` `200`,
/// `GET /gib` a body of 1 GiB, `GET /slow` never. Dropping it stops it.
struct Service {
    origin: String,
    task: tokio::task::JoinHandle<()>,
}

impl Service {
    async fn start() -> Self {
        let app = Router::new()
            .route(
                "/charge",
                post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, ALREADY) }),
            )
            .route("/v2/charge", post(|| async { "charged" }))
            .route("/gib", get(gib))
            .route("/slow", get(std::future::pending::<&'static str>));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let origin = format!("http://{}", listener.local_addr().expect("its address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the service runs");
        });
        Self { origin, task }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn gib() -> axum::response::Response {
    const CHUNK: usize = 64 * 1024;
    let chunk = bytes::Bytes::from(vec![b'x'; CHUNK]);
    let stream = futures_util::stream::iter(
        (0..GIB / CHUNK as u64).map(move |_| Ok::<_, std::convert::Infallible>(chunk.clone())),
    );
    axum::response::Response::new(axum::body::Body::from_stream(stream))
}

/// An engine granting `replayable` (and its other versions) the service, a region and
/// the secret, and `http-probe` the service with a response cap of 100 MiB.
fn engine(origin: &str) -> Engine {
    let dir = tempfile::tempdir().expect("a temp dir").keep();
    std::fs::write(dir.join("api.key"), API_KEY).expect("the secret's file");
    let section = |name: &str| {
        format!(
            "[plugins.{name}]\nallowed_outbound_hosts = [\"{origin}\"]\n\
             [plugins.{name}.config]\nregion = \"eu-west\"\n\
             [plugins.{name}.secrets]\napi_key = {{ file = \"api.key\" }}\n"
        )
    };
    let toml = format!(
        "{}{}{}[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\nmax_response_bytes = 104857600\n",
        section("replayable"),
        section("replayable-fixed"),
        section("replayable-moved"),
    );
    let engine = Engine::new(EngineConfig {
        cache_dir: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        ..test_config()
    })
    .expect("the test engine starts");
    let grants = Grants::parse(&dir.join("jobhost.toml"), &toml).expect("valid grants");
    engine.grants().replace(grants);
    engine
}

async fn load(engine: &Engine, name: &str) -> Plugin {
    try_load(engine, fixture(name))
        .await
        .unwrap_or_else(|err| panic!("{name} loads: {err}"))
}

/// Run `replay.Charge` of order o-17 at `origin`, recording it into `kept` if it fails.
async fn charge(plugin: &Plugin, origin: &str, kept: &Kept) -> Outcome {
    charge_recorded(plugin, origin, kept, false).await
}

/// [`charge`], keeping the recording of a completed attempt too if `completed`.
async fn charge_recorded(plugin: &Plugin, origin: &str, kept: &Kept, completed: bool) -> Outcome {
    let payload = serde_json::json!({"url": origin, "order": "o-17"}).to_string();
    let job = Invocation {
        record: Some(Record {
            to: kept,
            completed,
        }),
        ..invocation("replay.Charge", payload.as_bytes())
    };
    plugin.invoke(job).await
}

#[tokio::test]
async fn a_failed_attempt_replays_offline_to_the_same_reason_and_log_lines() {
    let service = Service::start().await;
    let origin = service.origin.clone();
    let engine = engine(&origin);
    let plugin = load(&engine, "replayable").await;
    let kept = Kept::default();

    let outcome = charge(&plugin, &origin, &kept).await;
    let Outcome::Failed(JobError::Retryable(reason)) = &outcome else {
        panic!("a 500 is a retryable failure, got {outcome:?}");
    };
    assert!(
        reason.contains(ALREADY),
        "the reason carries the body: {reason}"
    );
    let mut recordings = kept.taken();
    assert_eq!(recordings.len(), 1, "the failed attempt is recorded");
    let recording = recordings.remove(0);

    // What it holds: the config value, the secret by name only, the follow-up's id, the
    // response; never the secret's value.
    let config: Vec<(&str, &ConfigAnswer)> = (recording.imports.iter())
        .filter_map(|import| match import {
            Import::Config { key, answer } => Some((key.as_str(), answer)),
            _ => None,
        })
        .collect();
    assert_eq!(
        config,
        [
            ("region", &ConfigAnswer::Value("eu-west".into())),
            ("api_key", &ConfigAnswer::Secret)
        ]
    );
    let http = (recording.imports.iter())
        .find_map(|import| match import {
            Import::Http {
                method,
                url,
                answer,
            } => Some((method, url, answer)),
            _ => None,
        })
        .expect("the request is recorded");
    assert_eq!(http.0, "POST");
    assert_eq!(*http.1, format!("{origin}/charge?order=o-17"));
    let response = http.2.as_ref().expect("a response");
    assert_eq!(
        (response.status, response.body.0.as_slice()),
        (500, ALREADY.as_bytes())
    );
    assert!(
        recording
            .imports
            .iter()
            .any(|i| matches!(i, Import::Enqueue { .. })),
        "the follow-up is recorded"
    );
    let json = serde_json::to_string(&recording).expect("JSON");
    assert!(
        !json.contains(API_KEY),
        "the secret's value is never recorded"
    );
    assert_eq!(recording.plugin.sha256, *plugin.identity().sha256);
    let charging = &recording.log[0];
    assert_eq!(charging.message, "charging");
    assert!(
        charging.fields.contains("api_key=\"set\""),
        "{}",
        charging.fields
    );

    // The service is gone: the replay needs nothing but the recording.
    drop(service);
    let replayed = plugin.replay(&recording).await;
    assert_eq!(
        replayed.outcome, recording.outcome,
        "the same outcome and reason"
    );
    assert_eq!(
        replayed.log, recording.log,
        "the same log lines, nonce, clock and receipt id included"
    );
    assert_eq!(replayed.divergence, None);

    // A fixed version now completes; one that calls another URL diverges there.
    let fixed = load(&engine, "replayable-fixed").await;
    let replayed = fixed.replay(&recording).await;
    assert_eq!(replayed.outcome.kind, "completed", "{:?}", replayed.outcome);
    assert_eq!(replayed.divergence, None);
    assert_eq!(
        replayed.log.last().map(|l| l.message.as_str()),
        Some("already charged")
    );

    let moved = load(&engine, "replayable-moved").await;
    let replayed = moved.replay(&recording).await;
    let divergence = replayed.divergence.expect("a different URL diverges");
    assert!(
        divergence.contains(&format!("http POST {origin}/charge?order=o-17"))
            && divergence.contains(&format!("http POST {origin}/v2/charge?order=o-17")),
        "the divergence names both calls: {divergence}"
    );
    assert_ne!(
        replayed.outcome.kind, "completed",
        "no invented answer lets it complete"
    );
}

#[tokio::test]
async fn a_completed_attempt_keeps_its_recording_only_when_sampled_and_replays_to_completion() {
    let service = Service::start().await;
    let engine = engine(&service.origin);
    let fixed = load(&engine, "replayable-fixed").await;
    let kept = Kept::default();
    let outcome = charge(&fixed, &service.origin, &kept).await;
    assert!(matches!(outcome, Outcome::Completed { .. }), "{outcome:?}");
    assert!(kept.taken().is_empty(), "not sampled: not kept");

    let outcome = charge_recorded(&fixed, &service.origin, &kept, true).await;
    assert!(matches!(outcome, Outcome::Completed { .. }), "{outcome:?}");
    let recording = kept.taken().pop().expect("sampled: kept");
    assert_eq!(recording.outcome.kind, "completed");
    drop(service);
    let replayed = fixed.replay(&recording).await;
    assert_eq!(
        (replayed.outcome, replayed.log, replayed.divergence),
        (recording.outcome, recording.log, None)
    );
}

#[tokio::test]
async fn a_recording_stays_within_its_bound_against_a_handler_that_reads_100_mib() {
    let service = Service::start().await;
    let engine = engine(&service.origin);
    let probe = load(&engine, "http-probe").await;
    let kept = Kept::default();
    let payload = serde_json::json!({"url": format!("{}/gib", service.origin)}).to_string();
    let job = Invocation {
        record: Some(Record {
            to: &kept,
            completed: false,
        }),
        timeout: Duration::from_secs(60),
        ..invocation("probe.Fetch", payload.as_bytes())
    };
    let outcome = probe.invoke(job).await;
    // The probe reads until the 100 MiB cap fails the body: far more than a recording holds.
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    let recording = kept.taken().pop().expect("the failed attempt is recorded");
    let json = serde_json::to_vec(&recording).expect("JSON");
    assert!(
        json.len() < RECORDING_MAX_BYTES + 64 * 1024,
        "the recording is {} bytes",
        json.len()
    );
    assert!(recording.cut.is_some(), "the recording says it was cut");
    let replayed = probe.replay(&recording).await;
    let divergence = replayed.divergence.unwrap_or_default();
    assert!(
        replayed.outcome != recording.outcome || divergence.contains("cut"),
        "a replay past the cut says so rather than inventing the rest: {:?} / {divergence}",
        replayed.outcome
    );
}

#[tokio::test]
async fn an_attempt_that_timed_out_waiting_for_a_response_replays_to_the_same_timeout() {
    let service = Service::start().await;
    let engine = engine(&service.origin);
    let probe = load(&engine, "http-probe").await;
    let kept = Kept::default();
    let payload = serde_json::json!({"url": format!("{}/slow", service.origin)}).to_string();
    let job = Invocation {
        record: Some(Record {
            to: &kept,
            completed: false,
        }),
        timeout: Duration::from_secs(1),
        ..invocation("probe.Fetch", payload.as_bytes())
    };
    // The request's own deadline is the job's: at that moment either the timeout stops
    // the guest, or the guest gets the request's timeout first and fails with it. Either
    // way, the replay must end the same.
    let outcome = probe.invoke(job).await;
    let timed_out = match &outcome {
        Outcome::Crashed(reason) => reason.contains("timed out"),
        Outcome::Failed(JobError::Retryable(reason)) => reason.contains("Timeout"),
        _ => false,
    };
    assert!(timed_out, "{outcome:?}");
    let recording = kept
        .taken()
        .pop()
        .expect("the timed-out attempt is recorded");
    drop(service);
    let replayed = probe.replay(&recording).await;
    assert_eq!(
        replayed.outcome, recording.outcome,
        "the replay ends as the attempt did"
    );
    assert_eq!(replayed.divergence, None);
}
