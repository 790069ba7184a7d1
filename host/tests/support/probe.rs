//! The `http-probe` fixture as a fleet's workload on RabbitMQ: an HTTP server its jobs call,
//! which records when each call starts and ends (a ledger kept apart from the hosts, that
//! tells how many jobs ran at once and how fast they started), and `jobhost run` hosts
//! serving the fixture under a grants file that sets its caps and rate limits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::get;
use jobhost::broker::{Backend, RabbitMqBackend};
use jobhost::envelope::Envelope;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::support::cli::{Host, STARTUP, jobhost, write_grants};
use crate::support::within;

/// The queue and job type of the `http-probe` fixture.
pub(crate) const QUEUE: &str = "test.http_probe";
pub(crate) const FETCH: &str = "probe.Fetch";

/// How long the ledger holds a call: long enough that calls of different hosts overlap.
pub(crate) const CALL: Duration = Duration::from_millis(300);

/// An HTTP server the jobs call: the ledger, apart from the hosts. `/work?key=K&i=N` answers
/// after [`CALL`]; `/stall?key=K&i=N` does the same, unless stalling is on, when it never
/// answers; `/hold?key=K&i=N` answers once the ledger lets go of held calls;
/// `/busy?key=K&i=N` answers `429` with `Retry-After: 2` to a key's first call, and `200`
/// at once to the rest.
pub(crate) struct Ledger {
    calls: Mutex<Vec<Call>>,
    stalling: Mutex<bool>,
    released: watch::Sender<bool>,
}

/// What `/busy` asks a key's first caller to wait.
pub(crate) const BUSY_RETRY_AFTER: Duration = Duration::from_secs(2);

/// One call of a job to the ledger.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) path: &'static str,
    pub(crate) key: String,
    pub(crate) started: Instant,
    /// `None` while it runs, or when its caller went away.
    pub(crate) ended: Option<Instant>,
}

impl Ledger {
    pub(crate) async fn start() -> (Arc<Self>, String) {
        let ledger = Arc::new(Self {
            calls: Mutex::default(),
            stalling: Mutex::default(),
            released: watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/work", get(|s, q| call(s, q, "/work")))
            .route("/stall", get(|s, q| call(s, q, "/stall")))
            .route("/hold", get(|s, q| call(s, q, "/hold")))
            .route("/busy", get(busy))
            .with_state(Arc::clone(&ledger));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let origin = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("the ledger runs") });
        (ledger, origin)
    }

    /// Whether `/stall` calls from now on never answer.
    pub(crate) fn stall(&self, on: bool) {
        *self.stalling.lock().expect("the ledger") = on;
    }

    /// Answer the `/hold` calls, those waiting and those to come.
    pub(crate) fn release(&self) {
        self.released.send_replace(true);
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("the ledger").clone()
    }

    pub(crate) fn count(&self, path: &str, ended: bool) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.path == path && (!ended || c.ended.is_some()))
            .count()
    }

    /// The most calls started after `since` running at one instant: of key `a`, of key
    /// `b`, and of every key.
    pub(crate) fn most_at_once_since(
        &self,
        since: Instant,
        a: &str,
        b: &str,
    ) -> (usize, usize, usize) {
        let after = |c: &Call| c.started > since;
        (
            self.most_at_once(Some(a), after),
            self.most_at_once(Some(b), after),
            self.most_at_once(None, after),
        )
    }

    /// The most calls of `key` (every key: `None`) that were running at one instant, among
    /// the calls `keep` keeps.
    pub(crate) fn most_at_once(&self, key: Option<&str>, keep: impl Fn(&Call) -> bool) -> usize {
        let mut edges: Vec<(Instant, i32)> = Vec::new();
        for call in self.calls().iter().filter(|c| keep(c)) {
            if key.is_some_and(|key| call.key != key) {
                continue;
            }
            edges.push((call.started, 1));
            edges.push((call.ended.unwrap_or_else(Instant::now), -1));
        }
        // An end before a start at the same instant: back to back is not at once.
        edges.sort();
        let (mut now, mut most) = (0, 0);
        for (_, step) in edges {
            now += step;
            most = most.max(now);
        }
        usize::try_from(most).unwrap_or(0)
    }
}

async fn call(
    State(ledger): State<Arc<Ledger>>,
    Query(query): Query<HashMap<String, String>>,
    path: &'static str,
) -> &'static str {
    let key = query.get("key").cloned().unwrap_or_default();
    let index = {
        let mut calls = ledger.calls.lock().expect("the ledger");
        calls.push(Call {
            path,
            key,
            started: Instant::now(),
            ended: None,
        });
        calls.len() - 1
    };
    let stall = path == "/stall" && *ledger.stalling.lock().expect("the ledger");
    if stall {
        // Until the caller goes away, which drops this call unended.
        std::future::pending::<()>().await;
    } else if path == "/hold" {
        let mut released = ledger.released.subscribe();
        released
            .wait_for(|released| *released)
            .await
            .expect("the ledger outlives its calls");
    } else {
        tokio::time::sleep(CALL).await;
    }
    ledger.calls.lock().expect("the ledger")[index].ended = Some(Instant::now());
    "done"
}

async fn busy(
    State(ledger): State<Arc<Ledger>>,
    Query(query): Query<HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let key = query.get("key").cloned().unwrap_or_default();
    let now = Instant::now();
    let mut calls = ledger.calls.lock().expect("the ledger");
    let first = !calls.iter().any(|c| c.path == "/busy" && c.key == key);
    calls.push(Call {
        path: "/busy",
        key,
        started: now,
        ended: Some(now),
    });
    if first {
        let wait = BUSY_RETRY_AFTER.as_secs().to_string();
        let headers = [("retry-after", wait)];
        (axum::http::StatusCode::TOO_MANY_REQUESTS, headers, "busy").into_response()
    } else {
        "done".into_response()
    }
}

/// Where [`start_host`] wrote `host`'s grants file.
pub(crate) fn grants_file(host: &Host) -> std::path::PathBuf {
    host.plugin_dir().join("grants").join("jobhost.toml")
}

/// `jobhost run --amqp AMQP --retry-granularity STEP --config FILE` serving `http-probe`,
/// with `grants` in FILE, once it consumes the fixture's queue; `amqp` is a broker URL or
/// a cluster's comma list.
pub(crate) fn start_host(amqp: &str, grants: &str, step: &str) -> Host {
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("http-probe"),
        dir.path().join("http-probe.wasm"),
    )
    .expect("the fixture copies");
    let config = dir.path().join("grants").join("jobhost.toml");
    std::fs::create_dir(config.parent().expect("a parent")).expect("a grants directory");
    write_grants(&config, grants);
    let mut command = jobhost();
    command
        .args([
            "run",
            "--amqp",
            amqp,
            "--retry-granularity",
            step,
            "--config",
        ])
        .arg(&config)
        .arg("--plugins")
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    host.wait_for_line(STARTUP, |l| {
        l.contains("consuming") && l.contains(&format!("queue={QUEUE}"))
    });
    host
}

/// Publish a `probe.Fetch` job through `backend` that calls `{origin}{path}?key=KEY&i=I`,
/// with `customer` KEY in its payload.
pub(crate) async fn fetch(
    backend: &RabbitMqBackend,
    origin: &str,
    path: &str,
    key: &str,
    i: usize,
) {
    let payload = json!({"url": format!("{origin}{path}?key={key}&i={i}"), "customer": key});
    let payload = RawValue::from_string(payload.to_string()).expect("JSON");
    backend
        .publish(&Envelope::new(FETCH, QUEUE, payload), None)
        .await
        .expect("the job is published");
}

/// Wait until `condition` holds, polling the ledger; fail naming `what` after `limit`.
pub(crate) async fn until(limit: Duration, what: &str, condition: impl Fn() -> bool) {
    within(limit, what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// How many jobs of `probe.Fetch` a host completed, by its log.
pub(crate) fn completions(host: &Host) -> usize {
    host.log_lines()
        .iter()
        .filter(|l| l.contains("job completed") && l.contains(FETCH))
        .count()
}

/// When the calls of `key` started, in order.
pub(crate) fn starts_of(ledger: &Ledger, key: &str) -> Vec<Instant> {
    let mut starts: Vec<_> = ledger
        .calls()
        .iter()
        .filter(|c| c.key == key)
        .map(|c| c.started)
        .collect();
    starts.sort();
    starts
}

/// A limit of 10/s with a burst of 10 held, give or take 2: starts at most `ahead` of
/// rate·t, and `most` in any one second (from [`rate_of`]).
pub(crate) fn assert_within_burst_of_ten(ahead: f64, most: usize) {
    assert!(
        ahead <= 12.0,
        "never more than the burst (10) ahead of rate·t, give or take 2: {ahead:.1}"
    );
    assert!(
        most <= 22,
        "at most burst + rate in a second, give or take 2: {most}"
    );
}

/// The most of `starts` in any one second; the rate from the first to the last one, not
/// counting `burst` (which may start at once); and by how much the starts ran ahead of
/// `per_second`·t at most (which a rate limit keeps at its burst).
pub(crate) fn rate_of(starts: &[Instant], burst: usize, per_second: f64) -> (usize, f64, f64) {
    let most = starts
        .iter()
        .map(|from| {
            starts
                .iter()
                .filter(|at| **at >= *from && **at - *from < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let span = starts
        .last()
        .zip(starts.first())
        .map(|(last, first)| *last - *first);
    let rate = span.map_or(0.0, |span| {
        starts.len().saturating_sub(burst) as f64 / span.as_secs_f64()
    });
    let ahead = starts
        .iter()
        .enumerate()
        .map(|(n, at)| (n + 1) as f64 - per_second * (*at - starts[0]).as_secs_f64())
        .fold(0.0, f64::max);
    (most, rate, ahead)
}
