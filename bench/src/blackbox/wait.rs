//! Jobs that wait (BENCHMARKS.md, "Jobs that wait: I/O-bound jobs in flight"), black-box: `jobhost run` keeping 1,000 and 10,000 I/O-bound
//! jobs in flight against a local server that answers after a fixed latency.
//!
//! # Per level of jobs in flight (`JOBHOST_BENCH_WAIT_INFLIGHT`, default `1000,10000`)
//! 1. The ideal: in flight ÷ latency jobs/s (`JOBHOST_BENCH_WAIT_LATENCY_MS`, default 1000).
//! 2. The raw reference: a plain tokio + hyper client in this process, that many tasks,
//!    a new connection per request as the host makes, the same number of requests to the
//!    same server: the server's and the loopback's own ceiling in this run.
//! 3. The idle host: `jobhost run --concurrency N` with the `wait` fixture (`wait-wide`
//!    above 1,000: prefetch 10,000) on an empty queue, its RSS 2 s after it serves.
//! 4. The host: the queue filled with `wait.Get` jobs (5 per slot, 2 with `--quick`),
//!    then `jobhost run --concurrency N` drains it; jobs/s from its first delivery to its
//!    last completion ([`super::process`]), its peak RSS (sampled every 100 ms) and, at
//!    that peak, `/proc/PID/smaps_rollup` and its count of mappings.
//!
//! The server is this binary's hidden `wait-server`, a process of its own (so its sockets
//! and this process's client sockets do not share one file limit). The queue
//! `bench.wait.get` (and its dead-letter and hold queues) is deleted at the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobhost::broker::Backend as _;
use jobhost::envelope::Envelope;
use jobhost::plugin::EngineConfig;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

use super::process::{Consumer, Depth, completed_jobs};
use super::{free_port, jobhost_binary};
use crate::Sizes;
use crate::amqp;
use crate::report::{Report, Row, Samples, Target};
use crate::units::{engine, load_fixture};

/// The server's answer time unless `JOBHOST_BENCH_WAIT_LATENCY_MS` says otherwise.
const LATENCY: Duration = Duration::from_secs(1);

fn latency() -> Duration {
    std::env::var("JOBHOST_BENCH_WAIT_LATENCY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(LATENCY, Duration::from_millis)
}

fn levels() -> Vec<usize> {
    std::env::var("JOBHOST_BENCH_WAIT_INFLIGHT")
        .ok()
        .map(|levels| {
            levels
                .split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1_000, 10_000])
}

/// `wait-server --latency-ms N`: answer every request with `200 ok` after N ms; prints
/// its port on the first line of stdout.
pub(crate) async fn serve(latency_ms: u64) -> anyhow::Result<()> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind("127.0.0.1:0".parse()?)?;
    // A burst of 10,000 connects must not overflow the accept queue (a dropped SYN costs
    // the client a second).
    let listener = socket.listen(4096)?;
    println!("{}", listener.local_addr()?.port());
    let latency = Duration::from_millis(latency_ms);
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move {
            tokio::time::sleep(latency).await;
            "ok"
        }),
    );
    axum::serve(listener, app).await?;
    Ok(())
}

/// The server process and its address.
struct Server {
    _child: tokio::process::Child,
    addr: SocketAddr,
}

impl Server {
    async fn start(latency: Duration) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("wait-server")
            .args(["--latency-ms", &latency.as_millis().to_string()])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("stdout is piped")?;
        let line = BufReader::new(stdout)
            .lines()
            .next_line()
            .await?
            .context("the wait server printed no port")?;
        let port: u16 = line.trim().parse()?;
        Ok(Self {
            _child: child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
    }
}

/// `requests` GETs of `addr` from `tasks` tasks, a new connection each: their rate.
async fn raw_client(addr: SocketAddr, tasks: usize, requests: usize) -> anyhow::Result<f64> {
    let left = Arc::new(AtomicU64::new(requests as u64));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let left = Arc::clone(&left);
        set.spawn(async move {
            while left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                get(addr).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    Ok(crate::memory::rate(requests, start.elapsed()))
}

async fn get(addr: SocketAddr) -> anyhow::Result<()> {
    use http_body_util::BodyExt as _;
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get("/")
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status().is_success(), "{}", response.status());
    response.into_body().collect().await?;
    Ok(())
}

/// `jobhost run` serving `fixture` as `plugins/wait.wasm`, granted the server.
struct Host {
    binary: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl Host {
    fn new(binary: std::path::PathBuf, fixture: &str, server: SocketAddr) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins)?;
        std::fs::copy(jobhost_fixtures::wasm(fixture), plugins.join("wait.wasm"))?;
        std::fs::write(
            dir.path().join("jobhost.toml"),
            format!("[plugins.wait]\nallowed_outbound_hosts = [\"http://{server}\"]\n"),
        )?;
        Ok(Self { binary, dir })
    }

    fn spawn(&self, url: &str, concurrency: usize) -> anyhow::Result<(Consumer, SocketAddr)> {
        let admin = free_port()?;
        let at = |name: &str| self.dir.path().join(name);
        let mut command = Command::new(&self.binary);
        command
            .arg("run")
            .arg("--plugins")
            .arg(at("plugins"))
            .arg("--config")
            .arg(at("jobhost.toml"))
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--amqp", url])
            .args(["--admin", &admin.to_string()])
            .arg("--admin-token-file")
            .arg(at("admin.token"))
            .arg("--cache-dir")
            .arg(at("cache"))
            .env_remove("RUST_LOG");
        Ok((
            Consumer::spawn(command, Some(admin), Some(at("jobhost.log")))?,
            admin,
        ))
    }
}

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The peak RSS of `pid` while sampled, with its smaps_rollup and mapping count then.
#[derive(Default, Clone)]
struct Peak {
    rss_kib: u64,
    rollup: String,
    maps: usize,
}

fn sample(pid: u32, peak: &mut Peak) {
    let Ok(rss) = status_kib(pid, "VmRSS:") else {
        return;
    };
    if rss > peak.rss_kib {
        peak.rss_kib = rss;
        peak.rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .map(|rollup| {
                rollup
                    .lines()
                    .filter(|line| {
                        [
                            "Rss:",
                            "Anonymous:",
                            "Private_Dirty:",
                            "Shared_Clean:",
                            "Private_Clean:",
                        ]
                        .iter()
                        .any(|field| line.starts_with(field))
                    })
                    .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        peak.maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map(|maps| maps.lines().count())
            .unwrap_or(0);
    }
}

/// Wait until the host at `admin` answers `/metrics`.
async fn ready(admin: SocketAddr) -> anyhow::Result<()> {
    let start = Instant::now();
    while completed_jobs(admin).await.is_err() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the host never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub(crate) async fn run(sizes: &Sizes, quick: bool) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let latency = latency();
    let binary = tokio::task::spawn_blocking(jobhost_binary).await??;
    let server = Server::start(latency).await?;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let depth = Depth::open(&connection).await?;
    let backend = amqp::jobhost_backend(url).await?;
    let per_slot = if quick { 2 } else { 5 };
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut queue_name = None;
    for in_flight in levels() {
        let fixture = if in_flight > 1_000 {
            "wait-wide"
        } else {
            "wait"
        };
        let plugin = load_fixture(&engine(EngineConfig::default())?, fixture).await?;
        let queue = plugin.manifest().queues[0].clone();
        queue_name = Some(queue.name.clone());
        let jobs = in_flight * per_slot;
        let ms = latency.as_millis();
        #[allow(clippy::cast_precision_loss)]
        let ideal_rate = in_flight as f64 / latency.as_secs_f64();
        let ideal = Row::new(
            format!("wait {in_flight} in flight: ideal ({in_flight} ÷ {ms} ms)"),
            Some(ideal_rate),
            Samples::default(),
        );
        let raw_rate = raw_client(server.addr, in_flight, jobs).await?;
        let raw = Row::new(
            format!("wait {in_flight} in flight: raw tokio + hyper, a connection per request"),
            Some(raw_rate),
            Samples::default(),
        )
        .against(&ideal, None);

        amqp::delete(&connection, &queue.name).await?;
        backend.declare(&queue).await?;
        let host = Host::new(binary.clone(), fixture, server.addr)?;
        let (idle, admin) = host.spawn(url, in_flight)?;
        ready(admin).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle_kib = status_kib(idle.pid(), "VmRSS:")?;
        idle.stop(true).await.context("stopping the idle host")?;

        let target = format!("http://{}/", server.addr);
        let payload = serde_json::json!({ "url": target }).to_string();
        amqp::fill(
            &backend,
            (0..jobs).map(|_| {
                let payload = RawValue::from_string(payload.clone()).expect("JSON");
                Envelope::new("wait.Get", &queue.name, payload)
            }),
        )
        .await?;
        let (mut consumer, _admin) = host.spawn(url, in_flight)?;
        let pid = consumer.pid();
        let done = tokio_util::sync::CancellationToken::new();
        let sampling = tokio::spawn({
            let done = done.clone();
            async move {
                let mut peak = Peak::default();
                while !done.is_cancelled() {
                    sample(pid, &mut peak);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                peak
            }
        });
        let measured = consumer
            .measure(&depth, &queue.name, jobs, None)
            .await
            .with_context(|| format!("draining {jobs} waiting jobs at {in_flight} in flight"))?;
        done.cancel();
        let peak = sampling.await?;
        consumer.stop(true).await.context("stopping the host")?;
        let host_rate = crate::memory::rate(jobs, measured.consumer.wall);
        let target = if in_flight > 1_000 { 0.8 } else { 0.95 };
        let host_row = Row::new(
            format!(
                "wait {in_flight} in flight: `jobhost run --concurrency {in_flight}` + `{fixture}`"
            ),
            Some(host_rate),
            Samples::default(),
        )
        .cpu(Some(measured.consumer.cpu / u32::try_from(jobs)?));
        rows.push(ideal.clone());
        rows.push(raw.clone());
        rows.push(
            host_row
                .clone()
                .against(&ideal, Some(Target::RatioAtLeast(target))),
        );
        let mut versus_raw = host_row.against(&raw, None);
        versus_raw.scenario = format!("wait {in_flight} in flight: host against raw");
        rows.push(versus_raw);
        let above = peak.rss_kib.saturating_sub(idle_kib);
        #[allow(clippy::cast_precision_loss)]
        let per_job = above as f64 / in_flight as f64;
        details.push(format!(
            "wait {in_flight}: {jobs} jobs in {:.2} s; host RSS idle {} MiB, peak {} MiB: {per_job:.1} KiB per job in flight above the idle host (target 48); at the peak {} mappings, smaps_rollup {}",
            measured.consumer.wall.as_secs_f64(),
            idle_kib / 1024,
            peak.rss_kib / 1024,
            peak.maps,
            peak.rollup,
        ));
    }
    if let Some(queue) = queue_name {
        amqp::delete(&connection, &queue).await?;
    }
    backend.close().await;
    details.push(format!(
        "wait: a server (this binary's `wait-server`, a process of its own) answering `200 ok` after {} ms; jobs `wait.Get` (fixture `wait`, prefetch 1,000; `wait-wide`, prefetch 10,000) pre-published into `bench.wait.get`, {per_slot} per slot; host jobs/s from its first delivery to its last completion, cpu/job the host process's; the raw client makes the same requests in this process with a new connection each, as the host does",
        latency.as_millis()
    ));
    Ok(Report { rows, details })
}
