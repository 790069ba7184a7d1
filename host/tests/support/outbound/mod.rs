//! Shared by the outbound HTTP tests: a local HTTP (or HTTPS) server started by the test,
//! a listener that only records whether anything connected, and engines granting
//! `http-probe` what a test's grants file says.

pub mod pki;

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use jobhost::grants::Grants;
use jobhost::job::{Invocation, Outcome};
use jobhost::plugin::{Engine, EngineConfig, Plugin};
use jobhost_sdk::JobError;
use serde_json::Value;

use crate::support::plugin::{fixture, invocation, test_config, try_load};

pub const GIB: u64 = 1024 * 1024 * 1024;

/// A local HTTP server, counting the requests it answers.
///
/// | path | answer |
/// |---|---|
/// | `/ok` | `200 hello` |
/// | `/busy-once` | `429` with `Retry-After: 2` the first time, `200 hello` afterwards |
/// | `/redirect?to=URL` | `302` to `URL` |
/// | `/slow` | never answers |
/// | `/too-many` | `429` with `Retry-After: 2` |
/// | `/gib` | `200` and a body of 1 GiB, made as it is sent |
/// | `/hold` | `200` after 300 ms, counting the requests it holds at once |
/// | `/sized` (`PUT`, `POST`) | `411` to a body without `Content-Length` (a chunked one), else `200 got N bytes` |
pub struct Server {
    /// `http` or `https`.
    scheme: &'static str,
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    held: Arc<Held>,
    _task: tokio::task::JoinHandle<()>,
}

/// Requests `/hold` holds now, and the most it held at once.
#[derive(Debug, Default)]
struct Held {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Server {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        Self::serve("http", listener).await
    }

    /// The same server over TLS, presenting `pki`'s server certificate.
    pub async fn start_tls(pki: &pki::Pki) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()));
        Self::serve("https", TlsListener { listener, acceptor }).await
    }

    async fn serve<L>(scheme: &'static str, listener: L) -> Self
    where
        L: axum::serve::Listener<Addr = SocketAddr>,
    {
        let requests = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(Held::default());
        let app = Router::new()
            .route("/hold", get(hold).with_state(Arc::clone(&held)))
            .route("/ok", get(|| async { "hello" }))
            .route(
                "/busy-once",
                get(busy_once).with_state(Arc::new(AtomicBool::new(false))),
            )
            .route("/redirect", get(redirect))
            .route("/slow", get(slow))
            .route("/too-many", get(too_many))
            .route("/gib", get(gib))
            .route("/sized", axum::routing::put(sized).post(sized))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&requests),
                count,
            ));
        let addr = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the test server runs");
        });
        Self {
            scheme,
            addr,
            requests,
            held,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT` (or `https://`) + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// The grant naming this server's address.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The most requests `/hold` held at once.
    pub fn most_held_at_once(&self) -> usize {
        self.held.most.load(Ordering::SeqCst)
    }
}

async fn hold(State(held): State<Arc<Held>>) -> &'static str {
    let now = held.now.fetch_add(1, Ordering::SeqCst) + 1;
    held.most.fetch_max(now, Ordering::SeqCst);
    // The server's latency, long enough that requests sent together overlap here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.now.fetch_sub(1, Ordering::SeqCst);
    "held"
}

async fn count(
    State(requests): State<Arc<AtomicUsize>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    requests.fetch_add(1, Ordering::SeqCst);
    next.run(request).await
}

async fn redirect(
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let to = query.get("to").cloned().unwrap_or_default();
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// Like servers that need a body's length before it comes (presigned S3 `PUT`s, many API
/// gateways): a chunked body is refused.
async fn sized(headers: HeaderMap, body: Bytes) -> Response {
    if headers.contains_key(header::CONTENT_LENGTH) {
        format!("got {} bytes", body.len()).into_response()
    } else {
        (StatusCode::LENGTH_REQUIRED, "a Content-Length is required").into_response()
    }
}

async fn slow() -> &'static str {
    // Longer than any test runs: the host must cut the request, not the server.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    "too late"
}

async fn too_many() -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::RETRY_AFTER, "2".parse().expect("a header value"));
    (StatusCode::TOO_MANY_REQUESTS, headers, "slow down").into_response()
}

async fn busy_once(State(answered): State<Arc<AtomicBool>>) -> Response {
    if answered.swap(true, Ordering::SeqCst) {
        "hello".into_response()
    } else {
        too_many().await
    }
}

/// TCP connections that become TLS sessions before the server sees them; a handshake that
/// fails (a client that does not trust the certificate) is dropped.
struct TlsListener {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.listener.accept().await else {
                continue;
            };
            if let Ok(stream) = self.acceptor.accept(stream).await {
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

async fn gib() -> Response {
    const CHUNK: usize = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let chunks = GIB / CHUNK as u64;
    let stream = futures_util::stream::iter(
        (0..chunks).map(move |_| Ok::<_, std::convert::Infallible>(chunk.clone())),
    );
    Response::builder()
        .header(header::CONTENT_LENGTH, GIB)
        .body(Body::from_stream(stream))
        .expect("a response")
}

/// A server that answers `200 ok` as soon as it has read a request's head, then reads
/// whatever else comes on the connection and drops it, counting the bytes: an upload to
/// it goes on for as long as the client sends.
pub struct EarlyAnswer {
    pub addr: SocketAddr,
    read: Arc<AtomicU64>,
    _task: tokio::task::JoinHandle<()>,
}

impl EarlyAnswer {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let addr = listener.local_addr().expect("its address");
        let read = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&read);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer_early(stream, Arc::clone(&counted)));
            }
        });
        Self {
            addr,
            read,
            _task: task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Bytes read from every connection, heads included.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::SeqCst)
    }
}

async fn answer_early(mut stream: tokio::net::TcpStream, read: Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0; 64 * 1024];
    let mut head = Vec::new();
    let mut answered = false;
    loop {
        let Ok(n) = stream.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        read.fetch_add(n as u64, Ordering::SeqCst);
        if !answered {
            head.extend_from_slice(&buffer[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                answered = true;
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A port that is listened on and never served: whether anything connected shows in
/// [`Watch::saw_nothing`].
pub struct Watch {
    listener: StdListener,
    pub addr: SocketAddr,
}

impl Watch {
    pub fn start() -> Self {
        let listener = StdListener::bind("127.0.0.1:0").expect("a local port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        Self { listener, addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Whether no connection reached the port. The kernel completes a TCP handshake
    /// before anyone accepts, so once a job has ended, a connection it made is waiting in
    /// the backlog.
    pub fn saw_nothing(&self) -> bool {
        matches!(self.listener.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// An engine of its own (the grants are the engine's), sharing the test binaries' cache of
/// compiled plugins, with `toml` as the grants file `plugins/jobhost.toml`; and
/// `http-probe` loaded into it.
pub async fn probe_granted(toml: &str) -> (Engine, Plugin) {
    probe_granted_in(Path::new("plugins/jobhost.toml"), toml).await
}

/// [`probe_granted`] with the grants file at `file` (secret files are relative to it).
pub async fn probe_granted_in(file: &Path, toml: &str) -> (Engine, Plugin) {
    granted_in("http-probe", file, toml).await
}

/// An engine of its own granting what `toml` says, as [`probe_granted`] does, with fixture
/// `name` loaded into it.
pub async fn granted(name: &str, toml: &str) -> (Engine, Plugin) {
    granted_in(name, Path::new("plugins/jobhost.toml"), toml).await
}

async fn granted_in(name: &str, file: &Path, toml: &str) -> (Engine, Plugin) {
    let cache_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let engine = Engine::new(EngineConfig {
        cache_dir: Some(cache_dir),
        ..test_config()
    })
    .expect("the test engine starts");
    let grants = Grants::parse(file, toml).expect("the test's grants are valid");
    engine.grants().replace(grants);
    let plugin = try_load(&engine, fixture(name))
        .await
        .unwrap_or_else(|err| panic!("{name} loads: {err}"));
    (engine, plugin)
}

/// Run `probe.Fetch` of `url`.
pub async fn fetch(plugin: &Plugin, url: &str, follow_redirects: bool) -> Outcome {
    let payload = serde_json::json!({"url": url, "follow_redirects": follow_redirects});
    run(plugin, "probe.Fetch", &payload, Duration::from_secs(30)).await
}

/// Run `probe.Send`: `method` `url` with `body`, through the SDK's client.
pub async fn send(plugin: &Plugin, method: &str, url: &str, body: &str) -> Outcome {
    let payload = serde_json::json!({"method": method, "url": url, "body": body});
    run(plugin, "probe.Send", &payload, Duration::from_secs(30)).await
}

pub async fn run(plugin: &Plugin, job_type: &str, payload: &Value, timeout: Duration) -> Outcome {
    let payload = serde_json::to_vec(payload).expect("JSON");
    let job = Invocation {
        timeout,
        ..invocation(job_type, &payload)
    };
    plugin.invoke(job).await
}

/// The report of a completed fetch.
pub fn report(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Completed { follow_ups } => {
            assert_eq!(follow_ups.len(), 1, "one report");
            serde_json::from_str(follow_ups[0].payload.get()).expect("a JSON report")
        }
        other => panic!("the fetch must complete, got {other:?}"),
    }
}

/// The message of a fetch that failed retryably.
pub fn failure(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed(JobError::Retryable(message)) => message,
        other => panic!("the fetch must fail retryably, got {other:?}"),
    }
}

/// How many body bytes the guest read before its fetch failed, from the failure's
/// `after N bytes of the body: ...`.
pub fn bytes_read(message: &str) -> u64 {
    message
        .strip_prefix("after ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(bytes, _)| bytes.parse().ok())
        .unwrap_or_else(|| panic!("the failure says how much was read: {message}"))
}
