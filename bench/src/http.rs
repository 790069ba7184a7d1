//! Outbound HTTP through a plugin against the same local server called natively: the
//! `http-probe` plugin's `probe.Fetch` (a fresh instance, the grant check, `wasi:http`, a
//! new connection per job) against a native hyper client making one new connection per
//! request, one request at a time in both.
//!
//! And what recording costs (docs/replay.md): the same fetch with its attempt recorded
//! (every import answer on the tape, dropped when the job completes), and a fetch that
//! fails on a `500` (`probe.Send`, through the SDK) without and with its recording kept (serialized to JSON, as the host
//! does before it publishes it).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use jobhost::grants::Grants;
use jobhost::job::{Invocation, Outcome, Record, Recorder, Recording};
use jobhost::plugin::{EngineConfig, Plugin};
use jobhost::trace::JobTrace;
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::Sizes;
use crate::memory::rate;
use crate::report::{Report, Row, Samples};
use crate::units::{engine, load_fixture};

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let addr = serve().await?;
    let url = format!("http://{addr}/ok");
    let engine = engine(EngineConfig::default())?;
    let grants = format!("[plugins.http-probe]\nallowed_outbound_hosts = [\"http://{addr}\"]\n");
    engine
        .grants()
        .replace(Grants::parse(Path::new("jobhost.toml"), &grants)?);
    let plugin = load_fixture(&engine, "http-probe").await?;
    let requests = sizes.http_requests;

    // Warm the pool, the allocator and the server before anything is timed.
    through_plugin(&plugin, &url, requests / 10, None, false).await?;
    native(addr, requests / 10).await?;
    let native = native(addr, requests).await?;
    let unrecorded = through_plugin(&plugin, &url, requests, None, false).await?;
    let recorded = through_plugin(&plugin, &url, requests, Some(&ToJson), false).await?;
    let fail = format!("http://{addr}/fail");
    let failing = through_plugin(&plugin, &fail, requests, None, true).await?;
    let kept = through_plugin(&plugin, &fail, requests, Some(&ToJson), true).await?;

    let native = Row::new("http: native hyper GET, 1 task", Some(native.0), native.1);
    let plugin = Row::new(
        "http: plugin GET via wasi:http, 1 task",
        Some(unrecorded.0),
        unrecorded.1,
    )
    .cpu(Some(unrecorded.2));
    let recorded = Row::new(
        "http: the same, recorded (completes, recording dropped)",
        Some(recorded.0),
        recorded.1,
    )
    .cpu(Some(recorded.2));
    let failing = Row::new(
        "http: plugin GET answered 500, not recorded",
        Some(failing.0),
        failing.1,
    )
    .cpu(Some(failing.2));
    let kept = Row::new(
        "http: plugin GET answered 500, recording kept as JSON",
        Some(kept.0),
        kept.1,
    )
    .cpu(Some(kept.2));
    Ok(Report {
        rows: vec![
            native.clone(),
            plugin.clone().against(&native, None),
            recorded.cpu_against(&plugin, None),
            recorded.against(&plugin, None),
            failing.clone().against(&native, None),
            kept.cpu_against(&failing, None),
            kept.against(&failing, None),
        ],
        details: Vec::new(),
    })
}

/// Serializes each recording to JSON, as the host does before it publishes one, and
/// drops it.
#[derive(Debug)]
struct ToJson;

impl Recorder for ToJson {
    fn keep(&self, recording: Recording) {
        let json = serde_json::to_vec(&recording).expect("a recording is JSON");
        std::hint::black_box(json);
    }
}

/// A local server answering `GET /ok` with `hello`.
async fn serve() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/ok", get(|| async { "hello" })).route(
        "/fail",
        get(|| async {
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "upstream down",
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// `requests` GETs, each on a new connection, as the plugin makes them.
async fn native(addr: SocketAddr, requests: usize) -> anyhow::Result<(f64, Samples)> {
    let mut latencies = Vec::with_capacity(requests);
    let start = Instant::now();
    for _ in 0..requests {
        let began = Instant::now();
        let stream = TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let connection = tokio::spawn(connection);
        let request = hyper::Request::get("/ok")
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<bytes::Bytes>::new())?;
        let response = sender.send_request(request).await?;
        anyhow::ensure!(response.status() == 200, "the server answers 200");
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(&body[..] == b"hello", "the server answers hello");
        drop(sender);
        connection.await??;
        latencies.push(began.elapsed());
    }
    Ok((rate(requests, start.elapsed()), Samples::new(latencies)))
}

/// `requests` jobs of `url`, one at a time, recorded into `recorder` if any, with this
/// process's CPU per job (the local server's included, the same in every row): `probe.Fetch`,
/// which completes whatever the status, or with `fails`, `probe.Send` through the SDK,
/// which fails retryably on a `500`.
async fn through_plugin(
    plugin: &Plugin,
    url: &str,
    requests: usize,
    recorder: Option<&dyn Recorder>,
    fails: bool,
) -> anyhow::Result<(f64, Samples, Duration)> {
    let (job_type, payload) = if fails {
        (
            "probe.Send",
            serde_json::json!({ "method": "GET", "url": url }),
        )
    } else {
        ("probe.Fetch", serde_json::json!({ "url": url }))
    };
    let payload = serde_json::to_vec(&payload)?;
    let cpu = crate::cpu::process_cpu()?;
    let mut latencies = Vec::with_capacity(requests);
    let start = Instant::now();
    for _ in 0..requests {
        let job = Invocation {
            job_id: Uuid::new_v4(),
            job_type,
            queue: "test.http_probe",
            attempt: 1,
            max_attempts: 1,
            deferrals: 0,
            priority: 0,
            age: Duration::ZERO,
            payload: &payload,
            batch: None,
            timeout: Duration::from_secs(60),
            trace: JobTrace::start(None),
            record: recorder.map(|to| Record {
                to,
                completed: false,
            }),
        };
        let began = Instant::now();
        let outcome = plugin.invoke(job).await;
        latencies.push(began.elapsed());
        anyhow::ensure!(
            matches!(outcome, Outcome::Completed { .. }) != fails,
            "the job must {}, got {outcome:?}",
            if fails { "fail" } else { "complete" }
        );
    }
    let cpu = (crate::cpu::process_cpu()? - cpu) / u32::try_from(requests)?;
    Ok((
        rate(requests, start.elapsed()),
        Samples::new(latencies),
        cpu,
    ))
}
