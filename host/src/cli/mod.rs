//! The command line: arguments, logging, dispatch, and what a failure's exit code is.
//!
//! Exit codes: 0 done, 1 the operation failed, 2 usage (from clap), 3 the host or the
//! broker cannot be reached.

mod batches;
mod broker_access;
mod build;
mod build_js;
mod build_py;
mod control;
mod dashboard;
mod demo_server;
mod dev;
mod diagnose;
mod guest_toolchain;
mod host;
mod log_format;
mod logging;
mod ops;
mod paths;
mod replay;
mod scaffold;
mod scaffold_js;
mod scaffold_py;
mod schedules;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jobhost::admin::{DEFAULT_ADDR, DEFAULT_DEAD_LIMIT};
use jobhost::trace::TraceContext;

pub(crate) use diagnose::{EXIT_FAILED, diagnose};
pub(crate) use logging::init_logging;

/// Log filter of commands that run a host or a build: our info, the libraries' warnings.
const HOST_LOG: &str = "info,wasmtime=warn,cranelift=warn,lapin=warn,notify=warn";
/// `dev`'s: also a line per completed job, because someone is watching its jobs, and the
/// CPU a line costs does not matter there.
const DEV_LOG: &str =
    "info,jobhost::worker=debug,wasmtime=warn,cranelift=warn,lapin=warn,notify=warn";
/// Log filter of the client commands, whose output is their answer.
const CLIENT_LOG: &str = "warn";

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Time, level, the job, the message, then the fields that add something.
    Text,
    /// One JSON object per line, every field flattened into it.
    Json,
}

/// The most `--threads` accepts, far above any machine's cores, so a typo cannot start
/// thousands of threads.
const MAX_THREADS: u16 = 512;

/// A RabbitMQ job host whose job handlers are hot-reloaded WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "jobhost", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Log filter in RUST_LOG syntax, e.g. `debug` or `info,jobhost::guest=debug`.
    #[arg(long, global = true, env = "RUST_LOG", value_name = "FILTER")]
    log: Option<String>,
    /// `text`: a short line per event, for people; `json`: one JSON object per line with
    /// every field, for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the host: load the plugin directory, follow its changes, work the queues.
    Run(HostArgs),
    /// Build the plugins, run the host, and rebuild a plugin whenever its sources change.
    Dev(HostArgs),
    /// Build plugins (Rust crates for `wasm32-wasip2`, JavaScript packages with
    /// componentize-js, Python projects with componentize-py) and drop their components
    /// into the plugin directory.
    Build(BuildArgs),
    /// Create a plugin (a Rust crate, JavaScript with `--lang js`, Python with `--lang
    /// python`) with a queue, a job and its handler, ready to build.
    New(NewArgs),
    /// Enqueue a job by its type name and JSON payload.
    Enqueue(EnqueueArgs),
    /// List the running host's plugins, queues, jobs and effective policies.
    Plugins(ClientArgs),
    /// Show a job type's effective retry policy and its wait schedule.
    Policy(PolicyArgs),
    /// Look at, replay or drop the dead letters of a queue.
    Dead {
        #[command(subcommand)]
        action: DeadAction,
    },
    /// Pause or resume a queue for the whole fleet.
    Queue {
        #[command(subcommand)]
        action: QueueAction,
    },
    /// Cancel a job wherever it is: queued, held, or running on any host.
    Job {
        #[command(subcommand)]
        action: JobAction,
    },
    /// List the grants file's schedules: next firing and last firings (when, host, job id).
    Schedules(ClientArgs),
    /// Show the newest batches, or one: completed, dead and pending of the total, and
    /// each callback (`enqueue --batch` opens one).
    Batches(BatchesArgs),
    /// Replay a recorded attempt offline, with its plugin version or another (`--plugin`).
    Replay(replay::ReplayArgs),
    /// Print a link that signs a browser in to the running host's dashboard (good once,
    /// for a few minutes); the host never logs one.
    Dashboard(DashboardArgs),
}

/// Where the plugins are.
#[derive(Debug, Args)]
struct PluginDirArg {
    /// The plugin directory: `*.wasm` files the host loads, and plugin crates to build.
    #[arg(long = "plugins", value_name = "DIR", default_value = "plugins")]
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct HostArgs {
    #[command(flatten)]
    plugins: PluginDirArg,
    /// The grants file: outbound origins, limits, config values and secrets per plugin;
    /// default `$XDG_CONFIG_HOME/jobhost/jobhost.toml` or `~/.config/jobhost/jobhost.toml`
    /// (with `--demo`, `jobhost.toml` of the plugin directory). It must be the host user's
    /// own and writable by no one else. Watched and reloaded with the plugins; no file
    /// grants nothing.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The largest plugin file loaded, in bytes or with a unit (`KiB`, `MiB`, `GiB`); a
    /// larger one is refused before it is read.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = size)]
    max_plugin_size: u64,
    #[command(flatten)]
    broker: BrokerArgs,
    /// Jobs running at once; the engine's instance pool is sized to fit.
    #[arg(long, value_name = "N", default_value_t = host::DEFAULT_CONCURRENCY,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(host::MAX_CONCURRENCY)))]
    concurrency: u32,
    /// Threads that run jobs, consume and settle (the async runtime's workers); default
    /// one per CPU core. Fewer threads wake each other less often: with short jobs on a
    /// machine shared with the broker, `--threads 1` spent 11-22% less CPU per job
    /// (BENCHMARKS.md), but CPU-bound plugins then share one core.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_THREADS)))]
    threads: Option<u16>,
    /// The step retry and deferral delays are rounded up to (each distinct delay is a
    /// hold queue).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration)]
    retry_granularity: Duration,
    /// How often a message may fail to settle (a publish or ack that did not happen) before
    /// it is dead-lettered as poison.
    #[arg(long, value_name = "N", default_value_t = 5)]
    max_redeliveries: u32,
    /// The broker's `consumer_timeout`: no job attempt runs longer than nine tenths of it,
    /// so the broker never redelivers a job that is still running.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = duration)]
    broker_consumer_timeout: Duration,
    /// Where the admin API listens.
    #[arg(long, env = "JOBHOST_ADMIN", value_name = "ADDR", default_value = DEFAULT_ADDR)]
    admin: String,
    #[command(flatten)]
    token: TokenFileArg,
    /// Where compiled plugins are cached: a directory of this user's own (created `0700`);
    /// default `$XDG_CACHE_HOME/jobhost` or `~/.cache/jobhost`.
    #[arg(long, env = "JOBHOST_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Enqueue `demo-jobs.jsonl` of the plugin directory once the plugins are loaded, and
    /// serve the HTTP endpoints the example plugins call on 127.0.0.1:7879.
    #[arg(long)]
    demo: bool,
    /// Export each job's span over OTLP/HTTP to this collector's base URL (`http://` only;
    /// spans go to `URL/v1/traces`).
    #[cfg(feature = "otlp")]
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
}

/// Where the admin token is.
#[derive(Debug, Args)]
struct TokenFileArg {
    /// The admin API's token file: the host writes a fresh token there at start (`0600`),
    /// the client commands read it; default `$XDG_STATE_HOME/jobhost/admin-ADDR.token` or
    /// under `~/.local/state/jobhost`.
    #[arg(long, env = "JOBHOST_ADMIN_TOKEN_FILE", value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
}

/// How to reach and authenticate to RabbitMQ.
#[derive(Debug, Args)]
struct BrokerArgs {
    /// The RabbitMQ broker, e.g. `amqp://user@host:5672/%2f`. Without one, `run` and `dev`
    /// use an in-memory broker that loses everything on exit; with one, `enqueue` and
    /// `dead` talk to it directly. The password is better given by `--amqp-password-file`
    /// or `JOBHOST_AMQP_PASSWORD` than in the URL, which other users see in process lists.
    /// For a cluster, repeat `--amqp` once per node or give a comma-separated list: the
    /// host connects to the first node that answers and moves to the next when it is lost.
    #[arg(
        long = "amqp",
        env = "AMQP_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    amqp_nodes: Vec<String>,
    /// A file whose content (one trailing newline trimmed) is the broker password; it
    /// replaces the URL's.
    #[arg(long, value_name = "FILE")]
    amqp_password_file: Option<PathBuf>,
    /// PEM certificates to trust for `amqps://`, in addition to the public roots.
    #[arg(long, value_name = "FILE")]
    amqp_ca_file: Option<PathBuf>,
    /// A PEM client certificate (chain) for `amqps://`, with `--amqp-client-key`.
    #[arg(long, value_name = "FILE", requires = "amqp_client_key")]
    amqp_client_cert: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of `--amqp-client-cert`.
    #[arg(long, value_name = "FILE", requires = "amqp_client_cert")]
    amqp_client_key: Option<PathBuf>,
}

impl BrokerArgs {
    /// Every `--amqp` as one comma-separated list of broker nodes, `None` without any.
    fn amqp(&self) -> Option<String> {
        (!self.amqp_nodes.is_empty()).then(|| self.amqp_nodes.join(","))
    }
}

#[derive(Debug, Args)]
struct BuildArgs {
    #[command(flatten)]
    plugins: PluginDirArg,
    /// The plugins to build (package names); all of them when none is given.
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

#[derive(Debug, Args)]
struct NewArgs {
    #[command(flatten)]
    plugins: PluginDirArg,
    /// The plugin's name: lowercase letters, digits and `-`, starting with a letter.
    name: String,
    /// The plugin's language: a Rust crate, a JavaScript package (built with
    /// componentize-js; needs Node.js 20+ and npm, and runs `npm install` in it), or a
    /// Python project (built with componentize-py; needs Python 3.11+ with `venv`, and
    /// creates its `.venv`).
    #[arg(long, value_enum, default_value_t)]
    lang: scaffold::Lang,
    /// The SDK to depend on by path (a jobhost checkout's `sdk` directory, `sdk-js` with
    /// `--lang js`, `sdk-python` with `--lang python`). Default: the SDK of the repository that holds the plugin directory,
    /// else the one this binary was built from; neither SDK is published, so without
    /// either the scaffold needs this.
    #[arg(long, value_name = "PATH")]
    sdk: Option<PathBuf>,
}

/// How a client command reaches the host or the broker.
#[derive(Debug, Args)]
struct ClientArgs {
    /// The running host's admin API.
    #[arg(long, env = "JOBHOST_ADMIN", value_name = "ADDR", default_value = DEFAULT_ADDR)]
    admin: String,
    #[command(flatten)]
    token: TokenFileArg,
    #[command(flatten)]
    broker: BrokerArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DashboardArgs {
    /// The running host's admin API.
    #[arg(long, env = "JOBHOST_ADMIN", value_name = "ADDR", default_value = DEFAULT_ADDR)]
    admin: String,
    #[command(flatten)]
    token: TokenFileArg,
    /// Also open the link in the desktop's browser, with `xdg-open`.
    #[arg(long)]
    open: bool,
}

#[derive(Debug, Args)]
struct EnqueueArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The job type, e.g. `email.SendEmail`.
    job_type: String,
    /// The payload, as JSON.
    #[arg(value_parser = json)]
    payload: serde_json::Value,
    /// Deliver after this long, e.g. `30s`.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    delay: Option<Duration>,
    /// The job expires this long after now, e.g. `10m`: delivered later, it is not run
    /// but dead-lettered as expired.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    expires_in: Option<Duration>,
    /// Refuse the job while another of its type with this key is queued, held or
    /// running; the refusal names that job. Needs `--unique-for`.
    #[arg(long, value_name = "KEY", requires = "unique_for")]
    unique: Option<String>,
    /// How long the `--unique` key is held at most, e.g. `10m`: it is free once the job
    /// completes, is dead-lettered or expires, or this long after now if the job has not.
    #[arg(long, value_name = "DURATION", value_parser = duration, requires = "unique")]
    unique_for: Option<Duration>,
    /// The job's queue, for RabbitMQ without a running host to ask.
    #[arg(long, value_name = "QUEUE")]
    queue: Option<String>,
    /// Join this W3C trace (`00-{trace id}-{parent id}-{flags}`) instead of starting one.
    #[arg(long, value_name = "TRACEPARENT", value_parser = traceparent)]
    traceparent: Option<TraceContext>,
    /// Enqueue one job of JOB_TYPE per element of the payload, a JSON array, as one
    /// batch, through the running host's API; the callbacks fire once across the fleet.
    #[arg(long, conflicts_with_all = ["delay", "expires_in", "unique", "queue", "traceparent"])]
    batch: bool,
    /// With `--batch`: the job type enqueued once every job completed.
    #[arg(long, value_name = "JOB_TYPE", requires = "batch")]
    on_success: Option<String>,
    /// With `--batch`: the job type enqueued once every job ended, completed or dead.
    #[arg(long, value_name = "JOB_TYPE", requires = "batch")]
    on_complete: Option<String>,
    /// With `--batch`: the job type enqueued at the first job dead-lettered.
    #[arg(long, value_name = "JOB_TYPE", requires = "batch")]
    on_death: Option<String>,
    /// With `--batch`: JSON each callback's payload carries as `context`.
    #[arg(long, value_name = "JSON", value_parser = json, requires = "batch")]
    context: Option<serde_json::Value>,
}

#[derive(Debug, Args)]
struct BatchesArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// One batch, by its id.
    batch_id: Option<uuid::Uuid>,
}

#[derive(Debug, Args)]
struct PolicyArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The job type.
    job_type: String,
}

#[derive(Debug, Subcommand)]
enum DeadAction {
    /// List the dead letters of QUEUE with their reasons, oldest first.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// The work queue whose dead letters to list.
        queue: String,
        /// The most to list.
        #[arg(long, default_value_t = DEFAULT_DEAD_LIMIT)]
        limit: usize,
    },
    /// Put the dead letters of QUEUE back on it, as attempt 1 with their job ids and no
    /// deadline.
    Replay {
        #[command(flatten)]
        client: ClientArgs,
        /// The work queue.
        queue: String,
    },
    /// Drop the dead letters of QUEUE.
    Purge {
        #[command(flatten)]
        client: ClientArgs,
        /// The work queue.
        queue: String,
    },
}

/// How an operator order reaches the fleet, and who gives it.
#[derive(Debug, Args)]
struct OrderArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Who gives the order, as cancelled jobs show it; default `$USER@hostname`.
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
}

#[derive(Debug, Subcommand)]
enum QueueAction {
    /// Stop every host consuming QUEUE, now and after restarts, until it is resumed; its
    /// messages keep their place and running jobs finish.
    Pause {
        #[command(flatten)]
        order: OrderArgs,
        /// The work queue.
        queue: String,
    },
    /// Let every host consume QUEUE again.
    Resume {
        #[command(flatten)]
        order: OrderArgs,
        /// The work queue.
        queue: String,
    },
}

#[derive(Debug, Subcommand)]
enum JobAction {
    /// Cancel job ID: interrupted at once on the host that runs it, or settled as cancelled
    /// without running when it is delivered; either way it lands in its queue's dead letters
    /// with who cancelled it and when.
    Cancel {
        #[command(flatten)]
        order: OrderArgs,
        /// The job's id.
        #[arg(value_parser = control::job_id)]
        job_id: uuid::Uuid,
    },
}

fn duration(text: &str) -> Result<Duration, String> {
    jobhost_sdk::parse_duration(text).map_err(|err| err.to_string())
}

/// Bytes, written plain or with a binary unit: `1048576`, `512KiB`, `64MiB`, `1GiB`.
fn size(text: &str) -> Result<u64, String> {
    let (digits, shift) = [("KiB", 10), ("MiB", 20), ("GiB", 30)]
        .into_iter()
        .find_map(|(unit, shift)| text.strip_suffix(unit).map(|digits| (digits, shift)))
        .unwrap_or((text, 0));
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| {
            "a positive size in bytes, or with a unit: `512KiB`, `64MiB`, `1GiB`".to_owned()
        })
}

fn traceparent(text: &str) -> Result<TraceContext, String> {
    TraceContext::from_headers(text.as_bytes(), None).ok_or_else(|| {
        "not a W3C traceparent: `00-{32 hex}-{16 hex}-{2 hex}`, lowercase, ids not all zero"
            .to_owned()
    })
}

fn json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))
}

impl Cli {
    /// The async runtime the command runs on: `--threads` workers for `run` and `dev`,
    /// tokio's default (one per core, or `TOKIO_WORKER_THREADS`) otherwise.
    pub(crate) fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all();
        if let Command::Run(args) | Command::Dev(args) = &self.command
            && let Some(threads) = args.threads
        {
            builder.worker_threads(usize::from(threads));
        }
        builder.build()
    }
}

/// Run the command.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => host::run(args).await,
        Command::Dev(args) => dev::run(args).await,
        Command::Build(args) => build::run(&args.plugins.dir, &args.names).await,
        Command::New(args) => {
            scaffold::run(
                &args.plugins.dir,
                &args.name,
                args.lang,
                args.sdk.as_deref(),
            )
            .await
        }
        Command::Enqueue(args) => ops::enqueue(args).await,
        Command::Plugins(args) => ops::plugins(args).await,
        Command::Policy(args) => ops::policy(args).await,
        Command::Dead { action } => ops::dead(action).await,
        Command::Queue { action } => control::queue(action).await,
        Command::Job { action } => control::job(action).await,
        Command::Dashboard(args) => dashboard::run(args).await,
        Command::Schedules(args) => schedules::run(args).await,
        Command::Batches(args) => batches::show(args).await,
        Command::Replay(args) => replay::run(args).await,
    }
}
