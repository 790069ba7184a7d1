//! The one support tree of the integration tests, declared by each test binary's `main.rs`
//! as `mod support;`. Here, the helpers of the broker tests: where the broker is, unique
//! queue names, queue cleanup, virtual hosts of a test's own, bounded waits, and a raw AMQP
//! channel to look at what the backend wrote. Below, one module per kind of test.
//!
//! Every binary compiles the whole tree and uses a different part of it, so `dead_code`
//! (and `unreachable_pub`, for the `pub` items of the modules below) is allowed for the
//! tree as a whole, here, rather than item by item.
#![allow(dead_code, unreachable_pub)]

/// Headless Chromium through chromedriver, for the dashboard's browser tests.
pub(crate) mod browser;
/// `tracing` output captured in memory.
pub(crate) mod capture;
/// The real `jobhost` binary as a host process and as its client.
pub(crate) mod cli;
/// The fault tests' ledger, `jobhost run` process and summary table.
pub(crate) mod faults;
/// The example email senders of the guest languages, and the jobs they are put through.
pub(crate) mod guest;
/// Node.js and npm for the JavaScript plugin tests, with a package cache reused between runs.
pub(crate) mod node;
/// A local HTTP(S) server and engines granting `http-probe` outbound requests.
pub(crate) mod outbound;
/// A payment service refusing every charge, and a project granting `replayable` it.
pub(crate) mod payments;
/// One shared engine, fixtures loaded once, and invocations with defaults.
pub(crate) mod plugin;
/// The `http-probe` fixture's fleet on RabbitMQ and the ledger of the calls its jobs make.
pub(crate) mod probe;
/// Python 3 and `venv` for the Python plugin tests, with a pip cache reused between runs.
pub(crate) mod python;
/// A worker with a fixture plugin on the test broker.
pub(crate) mod worker;

use std::future::Future;
use std::process::Command;
use std::time::Duration;

use jobhost::broker::{RabbitMqBackend, RabbitMqOptions};
use jobhost::policy::{Granularity, HoldDelay};
use lapin::message::Delivery;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// The default when `AMQP_URL` is unset: the broker of the development container.
const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Taken by a test that loads the machine's cores for a minute or more (thousands of jobs
/// on several hosts) and by a test whose timing such load would disturb (a schedule's
/// one-second ticks), so the two never run at once.
pub(crate) static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a test waits for something the broker should do in milliseconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

pub(crate) fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A unique name, so tests running in parallel (or leftovers of an aborted run)
/// never share a queue or a connection.
pub(crate) fn unique(what: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("jobhost-test.{what}.{}", &suffix[..12])
}

/// Set to `1` to skip the broker tests on a machine without RabbitMQ; without it, an
/// unreachable broker fails every broker test, so a missing broker never passes silently.
pub(crate) const SKIP_VARIABLE: &str = "JOBHOST_SKIP_BROKER_TESTS";

/// A backend on the test broker; `None` (the test skips) only when the broker is
/// unreachable and [`SKIP_VARIABLE`] asks to skip. Otherwise an unreachable broker fails
/// the test, naming the variable.
pub(crate) async fn backend(connection_name: &str) -> Option<RabbitMqBackend> {
    backend_with(RabbitMqOptions::default().connection_name(connection_name)).await
}

/// Like [`backend`], with `options`.
pub(crate) async fn backend_with(options: RabbitMqOptions) -> Option<RabbitMqBackend> {
    match RabbitMqBackend::connect(&amqp_url(), options).await {
        Ok(backend) => Some(backend),
        Err(error) if skip_requested() => {
            eprintln!("skipping: no RabbitMQ broker ({error}) and {SKIP_VARIABLE}=1");
            None
        }
        Err(error) => panic!(
            "the RabbitMQ broker is unreachable: {error}; start it (`rabbitmq-server -detached`), \
             set AMQP_URL, or set {SKIP_VARIABLE}=1 to skip the broker tests"
        ),
    }
}

/// Whether the run asked to skip the broker tests.
pub(crate) fn skip_requested() -> bool {
    std::env::var(SKIP_VARIABLE).as_deref() == Ok("1")
}

/// `delay` as a hold delay, rounded to the millisecond.
pub(crate) fn hold(delay: Duration) -> HoldDelay {
    Granularity::new(Duration::from_millis(1))
        .round(delay)
        .expect("fits a hold queue")
}

/// A plain lapin channel for inspecting queues behind the backend's back.
pub(crate) async fn raw_channel() -> Channel {
    raw_channel_at(&amqp_url()).await
}

/// A plain lapin channel to the broker at `url`.
pub(crate) async fn raw_channel_at(url: &str) -> Channel {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("a test connection to the broker");
    connection.create_channel().await.expect("a test channel")
}

/// Await `future`, failing the test with `what` if it takes longer than `limit`.
pub(crate) async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}

/// How many messages are ready on `queue`.
pub(crate) async fn ready(channel: &Channel, queue: &str) -> u32 {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .unwrap_or_else(|error| panic!("queue `{queue}` should exist: {error}"))
        .message_count()
}

/// Publish `body` to `queue` as any AMQP client would (JSON content type, no jobhost code),
/// returning once the broker has it (confirmed, on a channel in confirm mode).
pub(crate) async fn publish_plainly(channel: &Channel, queue: &str, body: &[u8]) {
    publish_with_headers(channel, queue, body, FieldTable::default()).await;
}

/// [`publish_plainly`], with `headers`.
pub(crate) async fn publish_with_headers(
    channel: &Channel,
    queue: &str,
    body: &[u8],
    headers: FieldTable,
) {
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_headers(headers);
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("basic.publish")
        .await
        .expect("the broker takes a raw message");
}

/// Take every dead letter off `{queue}.dead`, returning their `x-death-reason`s.
pub(crate) async fn take_death_reasons(channel: &Channel, queue: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    while let Some(letter) = take(channel, &format!("{queue}.dead")).await {
        let headers = letter.properties.headers().clone().unwrap_or_default();
        match headers.inner().get("x-death-reason") {
            Some(AMQPValue::LongString(reason)) => reasons.push(reason.to_string()),
            other => panic!("a dead letter without a reason: {other:?}"),
        }
    }
    reasons
}

/// Take one message off `queue` without the backend, acknowledged on the spot.
pub(crate) async fn take(channel: &Channel, queue: &str) -> Option<Delivery> {
    try_take(channel, queue).await.expect("basic.get")
}

/// [`take`], returning the broker's error instead of failing the test.
pub(crate) async fn try_take(
    channel: &Channel,
    queue: &str,
) -> Result<Option<Delivery>, lapin::Error> {
    let message = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await?;
    Ok(message.map(|message| message.delivery))
}

/// Run `rabbitmqctl` with `args`, returning its standard output.
pub(crate) fn rabbitmqctl(args: &[&str]) -> String {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `rabbitmqctl list_queues name arguments` for the queue named exactly `queue`.
pub(crate) fn queue_arguments(queue: &str) -> String {
    queue_columns(queue, &["arguments"])
}

/// `rabbitmqctl list_queues name COLUMNS...` for the queue named exactly `queue`: its
/// columns, tab-separated.
pub(crate) fn queue_columns(queue: &str, columns: &[&str]) -> String {
    let mut args = vec!["list_queues", "name"];
    args.extend_from_slice(columns);
    args.extend(["--no-table-headers", "--silent"]);
    rabbitmqctl(&args)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{queue}\t")).map(str::to_owned))
        .unwrap_or_else(|| panic!("queue `{queue}` should be listed by rabbitmqctl"))
}

/// Work queues (with their dead-letter queues) deleted when the guard drops, also when
/// the test fails. Hold queues expire by themselves.
#[derive(Debug)]
pub(crate) struct Cleanup(Vec<String>);

impl Cleanup {
    pub(crate) fn new(queues: &[&str]) -> Self {
        Self(
            queues
                .iter()
                .flat_map(|q| [q.to_string(), format!("{q}.dead")])
                .collect(),
        )
    }
}

impl Drop for Cleanup {
    /// On a thread of its own, because dropping happens inside the test's runtime,
    /// which cannot block on a second one.
    fn drop(&mut self) {
        let queues = std::mem::take(&mut self.0);
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a cleanup runtime");
            runtime.block_on(async {
                let channel = raw_channel().await;
                for queue in queues {
                    let _ = channel
                        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                        .await;
                }
            });
        })
        .join();
        if deleted.is_err() {
            eprintln!("deleting the test queues failed");
        }
    }
}

/// The broker's ids (pids) of the open connections named `name`.
pub(crate) fn connections_named(name: &str) -> Vec<String> {
    let listing = rabbitmqctl(&[
        "list_connections",
        "pid",
        "client_properties",
        "--no-table-headers",
        "--silent",
    ]);
    listing
        .lines()
        .filter(|line| line.contains(name))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Close the broker connections named `name` from the broker's side, as an operator or
/// a broker restart would, and return their ids. Only this test's connections: the
/// broker is shared.
pub(crate) fn close_connections_named(name: &str) -> Vec<String> {
    let pids = connections_named(name);
    assert!(!pids.is_empty(), "no connection named `{name}` to close");
    for pid in &pids {
        rabbitmqctl(&["close_connection", pid, "test"]);
    }
    pids
}

/// A virtual host of the test broker of a test's (or a fixture's) own, deleted with
/// everything in it when dropped: its queues, exchanges and the fleet's own queues that
/// hosts declare in it (`jobhost.control`, `jobhost.scheduler.leader`). Queue names fixed
/// by a plugin are then the test's alone, whatever else runs on the broker.
#[derive(Debug)]
pub(crate) struct Vhost {
    /// The virtual host's name, for `rabbitmqctl -p`.
    pub(crate) name: String,
    /// The broker's URL with this virtual host.
    pub(crate) url: String,
}

impl Vhost {
    /// A new virtual host named after `what`, the broker's `guest` user allowed everything.
    pub(crate) fn new(what: &str) -> Self {
        let name = unique(what);
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        let base = amqp_url();
        let root = base
            .rsplit_once('/')
            .map_or(base.as_str(), |(root, _)| root);
        let url = format!("{root}/{name}");
        Self { name, url }
    }

    pub(crate) async fn backend(&self, connection: &str) -> RabbitMqBackend {
        RabbitMqBackend::connect(
            &self.url,
            RabbitMqOptions::default().connection_name(connection),
        )
        .await
        .expect("a connection to the test's virtual host")
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let deleted = Command::new("rabbitmqctl")
            .args(["delete_vhost", &self.name])
            .output();
        if !deleted.is_ok_and(|output| output.status.success()) {
            eprintln!("deleting the virtual host `{}` failed", self.name);
        }
    }
}
