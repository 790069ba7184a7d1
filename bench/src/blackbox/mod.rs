//! The drain and CPU targets measured black-box (BENCHMARKS.md, "Method"), as a user
//! would: every consumer is a process of its own, and what it costs is that process's CPU.
//!
//! # Contenders, in this order in each round
//! 1. Raw lapin consume + ack, prefetch 200 (this binary's hidden `blackbox-consumer`).
//! 2. `queuey` 1.x's native no-op worker, prefetch 200 (the same subcommand).
//! 3. The floor: raw lapin acking 50 deliveries at a time with `multiple`, no task per
//!    delivery (the same subcommand); no consumer built on lapin spends less per job.
//! 4. The floor calling the no-op plugin (the `noop-wide` fixture) in a fresh instance
//!    per delivery: no host on lapin that keeps an instance per job spends less.
//! 5. and 6. Those two floors on `amqprs`, a client whose socket I/O runs as tasks on the
//!    runtime's threads where lapin's runs on a thread of its own (the same subcommand):
//!    what a change of client could save.
//! 7. The host's own `Worker` on its RabbitMQ backend (lapin), serving `noop-wide` (the
//!    same subcommand): `jobhost run` without its CLI, admin server and log, the control
//!    for the next one.
//! 8. The same worker on the bench's consume-only amqprs backend ([`crate::amqprs_backend`]):
//!    what a host ported to amqprs would spend per job.
//! 9. The `jobhost run` binary of the same build profile, with the `noop-wide` fixture
//!    alone in its plugin directory and its default settings. The host has no prefetch
//!    flag: a queue's prefetch is its plugin's, and `noop-wide` is the no-op on queue
//!    `bench.wide.noop` with prefetch 200. `JOBHOST_BENCH_FIXTURE=noop-busy` serves the
//!    same queue with a plugin that spends about 0.6 ms of CPU per job instead, and
//!    `JOBHOST_BIN` names another binary (a wrapper that adds flags, say).
//!
//! # Per contender and round
//! 1. Delete `bench.wide.noop` (and its dead-letter and hold queues), declare it as the
//!    fixture does, fill it with the round's no-op jobs through jobhost's publisher
//!    (persistent, confirmed, pipelined), as the in-process `rabbitmq` scenario does.
//! 2. Start the consumer, then measure it as [`process`] says: from its first delivery to
//!    its last completion, wall clock and the process's CPU, and the broker's CPU over the
//!    same span when the broker runs here ([`crate::cpu::broker_pid`]): the broker shares
//!    the machine's cores, so what a consumer makes it spend per job bounds the drain too.
//! 3. Stop it with `SIGTERM`.
//!
//! `TOKIO_WORKER_THREADS=N` in the bench's environment reaches every contender: the
//! children's runtimes and `jobhost run`'s (which reads it when `--threads` is not given)
//! all run N threads, so the CPU figures compare like with like at N; the table's notes
//! say so.
//!
//! The queue's name is the fixture's, fixed: two runs of this scenario at once on one
//! broker would share it. The queue is deleted at the end.

mod consumer;
mod process;
pub(crate) mod wait;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum as _;
use jobhost::broker::Backend as _;
use jobhost::plugin::EngineConfig;
use jobhost_sdk::QueueConfig;
use tokio::process::Command;

pub(crate) use consumer::{Args as ConsumerArgs, consume};

use crate::Sizes;
use crate::amqp;
use crate::memory::noop_envelope;
use crate::rabbit::{Drained, Rounds, WIDE_TARGETS, versus};
use crate::report::{Report, Row, Samples};
use crate::units::{engine, load_fixture};
use consumer::Peer;
use process::{Consumer, Depth};

/// The fixture `jobhost run` serves by default: the no-op on a queue with prefetch 200.
const FIXTURE: &str = "noop-wide";

/// The fixture `jobhost run` serves: `JOBHOST_BENCH_FIXTURE`, or [`FIXTURE`]. The queue is
/// the fixture's first and is filled with `noop.Noop` jobs, so another fixture must run
/// those there, as `noop-busy` does.
fn fixture() -> String {
    std::env::var("JOBHOST_BENCH_FIXTURE").unwrap_or_else(|_| FIXTURE.to_owned())
}

/// How long one drain may take before the scenario is called stuck.
const DEADLINE: Duration = Duration::from_secs(600);

/// How many consumers a round measures: raw lapin and queuey first, `jobhost run` last,
/// the floors and the host's worker between them.
const CONTENDERS: usize = 9;

/// The consumers, measured in this order in each round.
#[derive(Debug, Clone, Copy)]
enum Contender {
    Peer(Peer),
    Jobhost,
}

impl Contender {
    const ALL: [Self; CONTENDERS] = [
        Self::Peer(Peer::Raw),
        Self::Peer(Peer::Queuey),
        Self::Peer(Peer::Floor),
        Self::Peer(Peer::FloorWasm),
        Self::Peer(Peer::AmqprsFloor),
        Self::Peer(Peer::AmqprsFloorWasm),
        Self::Peer(Peer::Worker),
        Self::Peer(Peer::AmqprsWorker),
        Self::Jobhost,
    ];

    fn label(self, prefetch: u16, fixture: &str) -> String {
        let who = match self {
            Self::Peer(Peer::Raw) => "raw lapin consume+ack (process)".into(),
            Self::Peer(Peer::Queuey) => "queuey 1.x native no-op (process)".into(),
            Self::Peer(Peer::Floor) => "raw lapin, `multiple` acks, no task (process)".into(),
            Self::Peer(Peer::FloorWasm) => {
                "raw lapin, `multiple` acks, no task, wasm no-op (process)".into()
            }
            Self::Peer(Peer::AmqprsFloor) => {
                "raw amqprs, `multiple` acks, no task (process)".into()
            }
            Self::Peer(Peer::AmqprsFloorWasm) => {
                "raw amqprs, `multiple` acks, no task, wasm no-op (process)".into()
            }
            Self::Peer(Peer::Worker) => "host's worker on lapin, wasm no-op (process)".into(),
            Self::Peer(Peer::AmqprsWorker) => {
                "host's worker on amqprs, consume only, wasm no-op (process)".into()
            }
            Self::Jobhost if fixture == FIXTURE => "`jobhost run` + wasm no-op, defaults".into(),
            Self::Jobhost => format!("`jobhost run` + `{fixture}`, defaults"),
        };
        format!("blackbox p{prefetch}: {who}")
    }
}

/// What every drain shares.
struct Bench {
    url: String,
    connection: lapin::Connection,
    backend: std::sync::Arc<jobhost::broker::RabbitMqBackend>,
    queue: QueueConfig,
    depth: Depth,
    host: Host,
    /// The broker's process, when it runs on this machine.
    broker: Option<u32>,
}

impl Bench {
    /// Refill the queue with `jobs` jobs, drain it with `contender`, stop it; what it cost
    /// the consumer, and the broker's CPU per job where it is known.
    async fn drain(
        &self,
        contender: Contender,
        jobs: usize,
    ) -> anyhow::Result<(Drained, Option<Duration>)> {
        amqp::delete(&self.connection, &self.queue.name).await?;
        self.backend.declare(&self.queue).await?;
        amqp::fill(
            &self.backend,
            (0..jobs).map(|_| noop_envelope(&self.queue.name)),
        )
        .await?;
        let mut consumer = match contender {
            Contender::Peer(peer) => Consumer::spawn(self.peer_command(peer, jobs)?, None, None)?,
            Contender::Jobhost => self.host.spawn(&self.url)?,
        };
        let measured = consumer
            .measure(&self.depth, &self.queue.name, jobs, self.broker)
            .await
            .with_context(|| format!("measuring {contender:?}"))?;
        consumer
            .stop(matches!(contender, Contender::Jobhost))
            .await
            .with_context(|| format!("stopping {contender:?}"))?;
        let per_job = u32::try_from(jobs.max(1))?;
        Ok((
            Drained::new(jobs, measured.consumer, Samples::default()),
            measured.broker_cpu.map(|cpu| cpu / per_job),
        ))
    }

    /// This binary's hidden subcommand running `peer` on the queue.
    fn peer_command(&self, peer: Peer, jobs: usize) -> anyhow::Result<Command> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("blackbox-consumer")
            .args([
                "--peer",
                peer.to_possible_value()
                    .expect("no variant is skipped")
                    .get_name(),
            ])
            .args(["--queue", &self.queue.name])
            .args(["--prefetch", &self.queue.prefetch.to_string()])
            .args(["--jobs", &jobs.to_string()])
            .args(["--amqp-url", &self.url]);
        Ok(command)
    }
}

/// `jobhost run` and the directory it runs in: the plugin directory holding the fixture,
/// the compile cache, the admin token and the log.
struct Host {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Host {
    fn new(binary: PathBuf, fixture: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins)?;
        std::fs::copy(
            jobhost_fixtures::wasm(fixture),
            plugins.join(format!("{fixture}.wasm")),
        )?;
        Ok(Self { binary, dir })
    }

    /// `jobhost run` with its defaults, but for where its files go and its admin port,
    /// which must not collide with a host already running on this machine.
    fn spawn(&self, url: &str) -> anyhow::Result<Consumer> {
        let admin = free_port()?;
        let at = |name: &str| self.dir.path().join(name);
        let mut command = Command::new(&self.binary);
        command
            .arg("run")
            .arg("--plugins")
            .arg(at("plugins"))
            .args(["--amqp", url])
            .args(["--admin", &admin.to_string()])
            .arg("--admin-token-file")
            .arg(at("admin.token"))
            .arg("--cache-dir")
            .arg(at("cache"))
            // The host's default log filter, whatever the bench's caller set.
            .env_remove("RUST_LOG");
        Consumer::spawn(command, Some(admin), Some(at("jobhost.log")))
    }
}

/// The broker's CPU per job while each contender drained (median round), and the host's
/// against queuey's; none when the broker's process is not known.
fn broker_rows(broker: [Vec<Duration>; CONTENDERS], prefetch: u16, fixture: &str) -> Vec<Row> {
    let rows: Vec<Row> = broker
        .into_iter()
        .zip(Contender::ALL)
        .filter_map(|(mut cpu, contender)| {
            cpu.sort_unstable();
            let median = *cpu.get(cpu.len() / 2)?;
            let label = format!("{}, broker cpu/job", contender.label(prefetch, fixture));
            Some(Row::new(label, None, Samples::default()).cpu(Some(median)))
        })
        .collect();
    let [_, queuey, .., host] = &rows[..] else {
        return rows;
    };
    let mut versus = host.cpu_against(queuey, None);
    versus.scenario.clone_from(&host.scenario);
    rows.iter().cloned().chain([versus]).collect()
}

/// A loopback address whose port was free a moment ago.
fn free_port() -> anyhow::Result<std::net::SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The `jobhost` binary next to this one, built first by cargo with this binary's profile
/// so it is current; `JOBHOST_BIN` names another.
fn jobhost_binary() -> anyhow::Result<PathBuf> {
    if let Some(binary) = std::env::var_os("JOBHOST_BIN") {
        return Ok(binary.into());
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("the bench's binary has a directory")?;
    let mut build = std::process::Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()));
    build
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["build", "--quiet", "-p", "jobhost", "--bin", "jobhost"]);
    if dir.file_name().is_some_and(|name| name == "release") {
        build.arg("--release");
    }
    let built = build.status().context("running cargo to build `jobhost`")?;
    anyhow::ensure!(built.success(), "building `jobhost` failed: {build:?}");
    let binary = dir.join("jobhost");
    anyhow::ensure!(
        binary.exists(),
        "cargo built `jobhost`, but not at `{}`; set JOBHOST_BIN",
        binary.display()
    );
    Ok(binary)
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.rabbit_jobs;
    let binary = tokio::task::spawn_blocking(jobhost_binary).await??;
    let fixture = fixture();
    let plugin = load_fixture(&engine(EngineConfig::default())?, &fixture).await?;
    let queue = plugin.manifest().queues[0].clone();
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let bench = Bench {
        url: url.clone(),
        depth: Depth::open(&connection).await?,
        connection,
        backend: amqp::jobhost_backend(url).await?,
        queue,
        host: Host::new(binary.clone(), &fixture)?,
        broker: crate::cpu::broker_pid(),
    };
    // Rounds interleave the contenders, so that load from elsewhere on the machine does
    // not land on one of them only; each row is the median round.
    let mut rounds: [Rounds; CONTENDERS] = Default::default();
    let mut broker: [Vec<Duration>; CONTENDERS] = Default::default();
    for _ in 0..sizes.rounds {
        for ((rounds, broker), contender) in rounds.iter_mut().zip(&mut broker).zip(Contender::ALL)
        {
            let (drained, broker_cpu) = bench.drain(contender, jobs).await?;
            rounds.push(drained);
            broker.extend(broker_cpu);
        }
    }
    amqp::delete(&bench.connection, &bench.queue.name).await?;
    bench.backend.close().await;

    let prefetch = bench.queue.prefetch;
    let row =
        |rounds: Rounds, contender: Contender| rounds.row(contender.label(prefetch, &fixture));
    let [raw, queuey, floors @ .., host] = rounds;
    let [raw, queuey, host] = [
        row(raw, Contender::ALL[0]),
        row(queuey, Contender::ALL[1]),
        row(host, Contender::ALL[CONTENDERS - 1]),
    ];
    // What the CPU target (BENCHMARKS.md, "Missed targets") asks of the host, asked of the
    // floors and of the host's worker on either client: how close to the target any
    // consumer on lapin can come, with and without an instance per job, and one on a
    // client without an I/O thread of its own.
    let floors: Vec<Row> = floors
        .into_iter()
        .zip(&Contender::ALL[2..CONTENDERS - 1])
        .flat_map(|(rounds, &floor)| {
            let floor = row(rounds, floor);
            let cpu = floor.cpu_against(&queuey, None);
            [floor, cpu]
        })
        .collect();
    let mut rows = versus(host, raw, queuey, &WIDE_TARGETS);
    rows.splice(2..2, floors);
    rows.extend(broker_rows(broker, prefetch, &fixture));
    Ok(Report {
        rows,
        details: vec![
            format!(
                "blackbox: {jobs} no-op jobs pre-published into `{queue}` (prefetch {prefetch}, fixture `{fixture}`) before each contender, {rounds} rounds (median shown); each consumer a process of its own: `{binary}` with defaults, this binary's `blackbox-consumer` for raw lapin (acking each delivery; and the floor, acking 50 at a time with `multiple`, without and with a fresh instance of `{FIXTURE}` per delivery), the same two floors on amqprs 2.x, the host's worker serving `{FIXTURE}` on lapin and on a consume-only amqprs backend, and queuey; jobs/s and cpu/job (the process's user + system CPU from /proc/<pid>/stat) from its first delivery (queue depth below {jobs}) to its last completion (queue empty and its own count: the host's /metrics, the child's line), startup excluded",
                queue = bench.queue.name,
                rounds = sizes.rounds,
                binary = binary.display(),
            ),
            broker_detail(bench.broker),
        ]
        .into_iter()
        .chain(threads_detail())
        .collect(),
    })
}

/// A note when `TOKIO_WORKER_THREADS` gave every contender the same runtime threads, in
/// place of each one's default (one per core).
fn threads_detail() -> Option<String> {
    let threads = std::env::var("TOKIO_WORKER_THREADS").ok()?;
    Some(format!(
        "blackbox: TOKIO_WORKER_THREADS={threads}: every consumer (raw lapin, queuey, the floors, `jobhost run`) runs that many runtime worker threads instead of its default of one per core"
    ))
}

/// Where the broker rows come from, or why there are none.
fn broker_detail(broker: Option<u32>) -> String {
    match broker {
        Some(pid) => format!("blackbox: broker cpu/job is the user + system CPU of the broker's process (pid {pid}, all its threads) over the same span as the consumer's, divided by the jobs: what that consumer made the broker spend, on the cores they share"),
        None => "blackbox: no broker cpu/job: no single `beam.smp` process on this machine (set JOBHOST_BENCH_BROKER_PID to name it)".to_owned(),
    }
}
