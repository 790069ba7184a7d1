//! Outbound HTTP through a plugin against the same local server called natively: the
//! `http-probe` plugin's `probe.Fetch` (a fresh instance, the grant check, `wasi:http`, a
//! new connection per job) against a native hyper client making one new connection per
//! request, one request at a time in both.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use jobhost::grants::Grants;
use jobhost::job::{Invocation, Outcome};
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
    through_plugin(&plugin, &url, requests / 10).await?;
    native(addr, requests / 10).await?;
    let native = native(addr, requests).await?;
    let plugin = through_plugin(&plugin, &url, requests).await?;

    let native = Row::new("http: native hyper GET, 1 task", Some(native.0), native.1);
    let plugin = Row::new(
        "http: plugin GET via wasi:http, 1 task",
        Some(plugin.0),
        plugin.1,
    );
    Ok(Report {
        rows: vec![native.clone(), plugin.against(&native, None)],
        details: Vec::new(),
    })
}

/// A local server answering `GET /ok` with `hello`.
async fn serve() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/ok", get(|| async { "hello" }));
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

/// `requests` `probe.Fetch` jobs of `url`, one at a time.
async fn through_plugin(
    plugin: &Plugin,
    url: &str,
    requests: usize,
) -> anyhow::Result<(f64, Samples)> {
    let payload = serde_json::to_vec(&serde_json::json!({ "url": url }))?;
    let mut latencies = Vec::with_capacity(requests);
    let start = Instant::now();
    for _ in 0..requests {
        let job = Invocation {
            job_id: Uuid::new_v4(),
            job_type: "probe.Fetch",
            queue: "test.http_probe",
            attempt: 1,
            max_attempts: 1,
            deferrals: 0,
            priority: 0,
            age: Duration::ZERO,
            payload: &payload,
            timeout: Duration::from_secs(60),
            trace: JobTrace::start(None),
            recorder: None,
        };
        let began = Instant::now();
        let outcome = plugin.invoke(job).await;
        latencies.push(began.elapsed());
        anyhow::ensure!(
            matches!(outcome, Outcome::Completed { .. }),
            "the fetch must complete, got {outcome:?}"
        );
    }
    Ok((rate(requests, start.elapsed()), Samples::new(latencies)))
}
