//! Jobs that wait (BENCHMARKS.md, "Jobs that wait: I/O-bound jobs in flight"), black-box: `jobhost run` keeping 1,000 and 10,000 I/O-bound
//! jobs in flight against a local server that answers after a fixed latency.
//!
//! # Per level of jobs in flight (`JOBHOST_BENCH_WAIT_INFLIGHT`, default `1000,10000`)
//! 1. The ideal: in flight ÷ latency jobs/s (`JOBHOST_BENCH_WAIT_LATENCY_MS`, default 1000).
//! 2. The raw reference: a plain tokio + hyper client in this process, that many tasks,
//!    a new connection per request as the host makes, the same number of requests to the
//!    same server: the server's and the loopback's own ceiling in this run.
//! 3. The idle host: `jobhost run --concurrency N+1` (the one more is the slot the fast
//!    queue keeps for itself, docs/scaling.md) with the `wait` fixture (`wait-wide`
//!    above 1,000: prefetch 10,000) on an empty queue, its RSS 2 s after it serves.
//! 4. The host: the queue filled with `wait.Get` jobs (5 per slot, 2 with `--quick`),
//!    then `jobhost run --concurrency N+1` drains it; jobs/s from its first delivery to its
//!    last completion ([`super::process`]), its peak RSS (sampled every 100 ms) and, at
//!    that peak, `/proc/PID/smaps_rollup` and its count of mappings.
//! 5. Fairness: a host with the queue empty, then with 8 s of its work queued, while
//!    [`FAST_JOBS`] `wait.Fast` jobs trickle into `bench.wait.fast`: their start latency
//!    (publish to the server's arrival) alone and beside the saturated slow queue.
//!
//! The server is this binary's hidden `wait-server`, a process of its own (so its sockets
//! and this process's client sockets do not share one file limit). The queues
//! `bench.wait.get` and `bench.wait.fast` (and their dead-letter and hold queues) are
//! deleted at the end.

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

/// Fast jobs published per measurement of their start latency, at [`FAST_EVERY`].
const FAST_JOBS: usize = 100;

/// The spacing of fast jobs' publishes: 40 a second, a trickle beside the slow queue.
const FAST_EVERY: Duration = Duration::from_millis(25);

/// `wait-server --latency-ms N`: answer `GET /` with `200 ok` after N ms, and
/// `GET /fast?sent=MICROS` at once, noting how long after `sent` (microseconds since the
/// Unix epoch, when the bench published the job) it arrived and how many `/` requests
/// were waiting then; `GET /fast-stats` answers those notes as [`FastStats`] and forgets
/// them. Prints its port on the first line of stdout.
pub(crate) async fn serve(latency_ms: u64) -> anyhow::Result<()> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind("127.0.0.1:0".parse()?)?;
    // A burst of 10,000 connects must not overflow the accept queue (a dropped SYN costs
    // the client a second).
    let listener = socket.listen(4096)?;
    println!("{}", listener.local_addr()?.port());
    let latency = Duration::from_millis(latency_ms);
    let waiting = Arc::new(AtomicU64::new(0));
    let notes = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let slow = {
        let waiting = Arc::clone(&waiting);
        move || async move {
            waiting.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(latency).await;
            waiting.fetch_sub(1, Ordering::Relaxed);
            "ok"
        }
    };
    let fast = {
        let (waiting, notes) = (Arc::clone(&waiting), Arc::clone(&notes));
        move |query: axum::extract::Query<std::collections::HashMap<String, u64>>| async move {
            let sent = query.get("sent").copied().unwrap_or(0);
            let after = unix_micros().saturating_sub(sent);
            let note = (after, waiting.load(Ordering::Relaxed));
            notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(note);
            "ok"
        }
    };
    let stats = move || async move {
        let taken = std::mem::take(
            &mut *notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        axum::Json(FastStats::of(taken))
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(slow))
        .route("/fast", axum::routing::get(fast))
        .route("/fast-stats", axum::routing::get(stats));
    axum::serve(listener, app).await?;
    Ok(())
}

fn unix_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

/// What the server saw of the fast jobs since it was last asked: their count, their start
/// latency (publish to request) at the median, p99 and worst, and the fewest slow requests
/// waiting when one arrived (the slow queue's saturation meanwhile).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct FastStats {
    count: usize,
    /// Each fast request's (start latency in µs, slow requests waiting then), sorted.
    notes: Vec<(u64, u64)>,
}

impl FastStats {
    fn of(mut notes: Vec<(u64, u64)>) -> Self {
        notes.sort_unstable();
        Self {
            count: notes.len(),
            notes,
        }
    }

    fn merge(self, more: Self) -> Self {
        Self::of([self.notes, more.notes].concat())
    }

    /// The start latency at `share` (0.5 the median), in ms.
    fn latency_ms(&self, share: f64) -> f64 {
        if self.notes.is_empty() {
            return f64::NAN;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((self.notes.len() as f64 * share).ceil() as usize).clamp(1, self.notes.len());
        #[allow(clippy::cast_precision_loss)]
        let micros = self.notes[index - 1].0 as f64;
        micros / 1000.0
    }

    /// The fewest slow requests waiting at the server when a fast one arrived.
    fn fewest_waiting(&self) -> u64 {
        self.notes
            .iter()
            .map(|&(_, waiting)| waiting)
            .min()
            .unwrap_or(0)
    }

    fn summary(&self) -> String {
        let worst: Vec<String> = (self.notes.iter().rev().take(3))
            .map(|&(micros, waiting)| {
                format!("{:.1} ms with {waiting} waiting", micros as f64 / 1000.0)
            })
            .collect();
        format!(
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (worst: {})",
            self.latency_ms(0.5),
            self.latency_ms(0.99),
            self.latency_ms(1.0),
            worst.join(", ")
        )
    }
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
                get(addr, "/").await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    Ok(crate::memory::rate(requests, start.elapsed()))
}

/// `GET path` of `addr` on a new connection: its body, once the status says success.
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<bytes::Bytes> {
    use http_body_util::BodyExt as _;
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status().is_success(), "{}", response.status());
    Ok(response.into_body().collect().await?.to_bytes())
}

/// What the server at `addr` saw of fast jobs since it was last asked (and forgets it).
async fn fast_stats(addr: SocketAddr) -> anyhow::Result<FastStats> {
    Ok(serde_json::from_slice(&get(addr, "/fast-stats").await?)?)
}

/// Publish [`FAST_JOBS`] `wait.Fast` jobs to `queue`, one per [`FAST_EVERY`], each asking
/// the server's `/fast` with the instant it was published, and wait until the server has
/// seen them all: their start latency as the server saw it.
async fn fast_start_latency(
    backend: &Arc<jobhost::broker::RabbitMqBackend>,
    queue: &str,
    server: SocketAddr,
) -> anyhow::Result<FastStats> {
    fast_stats(server).await?;
    let mut every = tokio::time::interval(FAST_EVERY);
    for _ in 0..FAST_JOBS {
        every.tick().await;
        let url = format!("http://{server}/fast?sent={}", unix_micros());
        let payload = RawValue::from_string(serde_json::json!({ "url": url }).to_string())?;
        amqp::fill(backend, [Envelope::new("wait.Fast", queue, payload)]).await?;
    }
    let start = Instant::now();
    let mut seen = FastStats::default();
    loop {
        let more = fast_stats(server).await?;
        seen = seen.merge(more);
        if seen.count >= FAST_JOBS {
            return Ok(seen);
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the host started {} of {FAST_JOBS} fast jobs within 120 s",
            seen.count
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// The peak RSS of `pid` while sampled, with its smaps_rollup and mapping count then, and
/// where its resident memory was ([`resident_by_kind`]) at the last sample that passed the
/// previous such reading by a tenth (reading every mapping at each new peak would take the
/// host's CPU).
#[derive(Default, Clone)]
struct Peak {
    rss_kib: u64,
    rollup: String,
    maps: usize,
    by_kind: String,
    by_kind_at_kib: u64,
}

fn sample(pid: u32, slots: usize, peak: &mut Peak) {
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
        if rss > peak.by_kind_at_kib + peak.by_kind_at_kib / 10 {
            peak.by_kind_at_kib = rss;
            peak.by_kind = resident_by_kind(pid, slots).unwrap_or_else(|error| error.to_string());
        }
    }
}

/// Where `pid`'s resident memory is, from `/proc/PID/smaps`, for a host with `slots` job
/// slots. Adjacent mappings are one region (the pooling allocator reserves its linear
/// memories and its fiber stacks each as one range, which protections and copy-on-write
/// images then split into many mappings): the region of a TiB or more holds the linear
/// memories, the one of about 2 MiB per slot the fiber stacks; of the rest, what maps a
/// file (the binary, its libraries) is code, and the others are the heap, thread stacks
/// and the like.
fn resident_by_kind(pid: u32, slots: usize) -> anyhow::Result<String> {
    #[derive(Default)]
    struct Region {
        start: u64,
        end: u64,
        rss_kib: u64,
        file: bool,
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut regions: Vec<Region> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            else {
                continue;
            };
            let path = fields.nth(4).unwrap_or("");
            let file = path.starts_with('/') && !path.starts_with("/memfd:");
            match regions.last_mut() {
                Some(region) if region.end == start && region.file == file => region.end = end,
                _ => regions.push(Region {
                    start,
                    end,
                    rss_kib: 0,
                    file,
                }),
            }
        } else if first == "Rss:"
            && let Some(region) = regions.last_mut()
        {
            region.rss_kib += fields.next().and_then(|kib| kib.parse().ok()).unwrap_or(0);
        }
    }
    let stack_pool = slots as u64 * 2 * 1024 * 1024;
    let (mut memories, mut stacks, mut code, mut rest) = (0u64, 0u64, 0u64, 0u64);
    for region in &regions {
        let span = region.end - region.start;
        if span >= 1 << 40 {
            memories += region.rss_kib;
        } else if span >= stack_pool && span <= stack_pool + stack_pool / 4 {
            stacks += region.rss_kib;
        } else if region.file {
            code += region.rss_kib;
        } else {
            rest += region.rss_kib;
        }
    }
    Ok(format!(
        "linear memories {} MiB, fiber stacks {} MiB, heap and the rest {} MiB, code {} MiB",
        memories / 1024,
        stacks / 1024,
        rest / 1024,
        code / 1024
    ))
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
        let (idle, admin) = host.spawn(url, in_flight + 1)?;
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
        let (mut consumer, _admin) = host.spawn(url, in_flight + 1)?;
        let pid = consumer.pid();
        let done = tokio_util::sync::CancellationToken::new();
        let sampling = tokio::spawn({
            let done = done.clone();
            async move {
                let mut peak = Peak::default();
                while !done.is_cancelled() {
                    sample(pid, in_flight, &mut peak);
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

        // Fairness: the fast queue's start latency on the host with nothing else to do,
        // then while the slow queue keeps every slot busy (8 s of work queued).
        let fast_queue = plugin.manifest().queues[1].clone();
        amqp::delete(&connection, &fast_queue.name).await?;
        backend.declare(&fast_queue).await?;
        let (fair, fair_admin) = host.spawn(url, in_flight + 1)?;
        ready(fair_admin).await?;
        let quiet = fast_start_latency(&backend, &fast_queue.name, server.addr).await?;
        amqp::fill(
            &backend,
            (0..in_flight * 8).map(|_| {
                let payload = RawValue::from_string(payload.clone()).expect("JSON");
                Envelope::new("wait.Get", &queue.name, payload)
            }),
        )
        .await?;
        // The host takes a moment to fill its slots; the server's count of waiting slow
        // requests at each fast arrival shows whether it had.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let busy = fast_start_latency(&backend, &fast_queue.name, server.addr).await?;
        fair.stop(true).await.context("stopping the host")?;
        amqp::delete(&connection, &queue.name).await?;
        amqp::delete(&connection, &fast_queue.name).await?;
        backend.declare(&queue).await?;
        details.push(format!(
            "wait {in_flight}, fairness: {FAST_JOBS} `wait.Fast` jobs on `bench.wait.fast`, one per {} ms, publish to start (the server's arrival): on the host alone {}; beside `bench.wait.get` saturated (at least {} slow requests waiting at every fast arrival) {}",
            FAST_EVERY.as_millis(),
            quiet.summary(),
            busy.fewest_waiting(),
            busy.summary(),
        ));
        let host_rate = crate::memory::rate(jobs, measured.consumer.wall);
        let target = if in_flight > 1_000 { 0.8 } else { 0.95 };
        let host_row = Row::new(
            format!(
                "wait {in_flight} in flight: `jobhost run --concurrency {}` + `{fixture}`",
                in_flight + 1
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
            "wait {in_flight}: {jobs} jobs in {:.2} s; host RSS idle {} MiB, peak {} MiB: {per_job:.1} KiB per job in flight above the idle host (target 48); at the peak {} mappings, smaps_rollup {}; at {} MiB: {}",
            measured.consumer.wall.as_secs_f64(),
            idle_kib / 1024,
            peak.rss_kib / 1024,
            peak.maps,
            peak.rollup,
            peak.by_kind_at_kib / 1024,
            peak.by_kind,
        ));
    }
    if let Some(queue) = queue_name {
        amqp::delete(&connection, &queue).await?;
    }
    amqp::delete(&connection, "bench.wait.fast").await?;
    backend.close().await;
    details.push(format!(
        "wait: a server (this binary's `wait-server`, a process of its own) answering `200 ok` after {} ms; jobs `wait.Get` (fixture `wait`, prefetch 1,000; `wait-wide`, prefetch 10,000) pre-published into `bench.wait.get`, {per_slot} per slot; host jobs/s from its first delivery to its last completion, cpu/job the host process's; the raw client makes the same requests in this process with a new connection each, as the host does",
        latency.as_millis()
    ));
    Ok(Report { rows, details })
}
