//! The admin API answers only its owner: each refusal with its status, the token holder's
//! and a dashboard session's requests going through, and the server's bounds on
//! connections. The CLI's use of the token is in `cli_run.rs` (its commands pass the token
//! unchanged, `jobhost dashboard` prints a link) and in a test here.

use std::time::{Duration, Instant};

use jobhost::activity::Activity;
use jobhost::admin::api::{Command, OrderRequest};
use jobhost::admin::{
    self, AdminAccess, AdminClient, AdminState, ClientError, HEADER_READ_TIMEOUT, MAX_CONNECTIONS,
    MAX_DEAD_LIMIT,
};
use jobhost::broker::{Control, MemoryBackend};
use jobhost::grants::SharedGrants;
use jobhost::job::{Invocation, JobSpec, Manifest, Operator, Outcome};
use jobhost::metrics::Metrics;
use jobhost::policy::Granularity;
use jobhost::telemetry::Telemetry;
use jobhost::testing::native_unit;
use jobhost::worker::{Fleet, Plugins};
use jobhost_sdk::QueueConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::support::cli;

const TOKEN: &str = "the-test-token";
const PATIENCE: Duration = Duration::from_secs(10);

/// A running admin API on the memory backend, with a plugin whose queue is `q`, stopped
/// when dropped.
struct Api {
    addr: String,
    backend: MemoryBackend,
    stop: CancellationToken,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn api() -> Api {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let bound = listener.local_addr().expect("its address");
    let access = AdminAccess::new(TOKEN, "127.0.0.1:0", bound);
    let manifest = Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: "q".into(),
        queues: vec![QueueConfig::new("q")],
        jobs: vec![JobSpec {
            name: "q.Job".into(),
            queue: "q".into(),
            retry: None,
            timeout: None,
        }],
    };
    let plugins = Plugins::new();
    let unit = native_unit("q.wasm", manifest, |_: &Invocation<'_>| {
        Outcome::Completed { follow_ups: vec![] }
    });
    plugins.install(unit).expect("installs");
    let backend = MemoryBackend::new();
    let state = AdminState {
        backend: backend.clone(),
        plugins,
        granularity: Granularity::default(),
        access,
        metrics: Metrics::new(),
        activity: Activity::default(),
        telemetry: Telemetry::none(),
        grants: SharedGrants::default(),
        fleet: Fleet::default(),
        batches: jobhost::batches::Board::default(),
    };
    let stop = CancellationToken::new();
    tokio::spawn(admin::serve(listener, state, stop.clone()));
    Api {
        addr: bound.to_string(),
        backend,
        stop,
    }
}

/// The status code of `request_line` sent with `headers`, over a raw connection.
async fn status(api: &Api, request_line: &str, headers: &[&str]) -> u16 {
    let answer = answer(api, request_line, headers).await;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line: {answer}"))
}

/// The whole answer to `request_line` sent with `headers`, over a raw connection.
async fn answer(api: &Api, request_line: &str, headers: &[&str]) -> String {
    answer_with_body(api, request_line, headers, "").await
}

#[tokio::test]
async fn a_request_for_another_host_name_is_misdirected_421() {
    let api = api().await;
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1"] {
        let code = status(&api, "GET /healthz", &[&format!("Host: {host}")]).await;
        assert_eq!(code, 421, "a DNS-rebinding request for `{host}` is refused");
    }
    let local = format!("Host: {}", api.addr);
    assert_eq!(status(&api, "GET /healthz", &[&local]).await, 200);
    assert_eq!(
        status(&api, "GET /healthz", &["Host: localhost"]).await,
        200
    );
}

#[tokio::test]
async fn a_cross_site_browser_request_is_forbidden_403() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    for browser in [
        "Origin: http://evil.example",
        "Origin: null",
        "Sec-Fetch-Site: cross-site",
        // Another port of this machine: the same site, so its pages get SameSite cookies.
        "Sec-Fetch-Site: same-site",
        // Port 80's origin: another server of this machine, not the API on its own port.
        "Origin: http://127.0.0.1",
        "Origin: http://localhost",
        "Origin: http://[::1]",
    ] {
        let code = status(&api, "GET /healthz", &[&host, browser]).await;
        assert_eq!(code, 403, "`{browser}` is refused");
    }
    let own = format!("Origin: http://{}", api.addr);
    assert_eq!(status(&api, "GET /healthz", &[&host, &own]).await, 200);
    let from_a_link = "Sec-Fetch-Site: cross-site";
    assert_eq!(
        status(&api, "GET /", &[&host, from_a_link]).await,
        200,
        "the page opens from a link anywhere, `jobhost dashboard --open`'s file included"
    );
}

#[tokio::test]
async fn reading_payloads_failure_reasons_or_grants_without_the_token_is_unauthorized_401() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    for path in [
        "/dead/q",
        "/api/overview",
        "/api/events",
        "/plugins",
        "/policy/jobs.Work",
    ] {
        let request = format!("GET {path}");
        assert_eq!(
            status(&api, &request, &[&host]).await,
            401,
            "`{path}` needs the token or a session"
        );
        let wrong = "Authorization: Bearer not-the-token";
        assert_eq!(status(&api, &request, &[&host, wrong]).await, 401);
    }
    for (path, with_token) in [
        ("/dead/q", 200),
        ("/api/overview", 200),
        ("/plugins", 200),
        ("/policy/jobs.Work", 404),
    ] {
        let request = format!("GET {path}");
        assert_eq!(
            status(&api, &request, &[&host, &bearer]).await,
            with_token,
            "`{path}` with the token"
        );
    }
    for path in [
        "/healthz",
        "/metrics",
        "/",
        "/assets/dashboard.js",
        "/api/session",
    ] {
        let request = format!("GET {path}");
        assert_eq!(
            status(&api, &request, &[&host]).await,
            200,
            "`{path}` is open"
        );
    }
    let err = AdminClient::new(&api.addr)
        .dead_letters("q", 10)
        .await
        .expect_err("listing dead letters needs the token");
    assert!(
        matches!(&err, ClientError::Api { status: 401, message } if message.contains("jobhost dashboard")),
        "the refusal says how to get in: {err}"
    );
}

#[tokio::test]
async fn mutating_requests_without_the_token_are_unauthorized_401() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    for request in [
        "POST /jobs",
        "POST /dead/q/replay",
        "DELETE /dead/q",
        "POST /queues/q/pause",
        "POST /queues/q/resume",
        "POST /jobs/6f9619ff-8b86-4d01-b42d-00c04fc964ff/cancel",
    ] {
        assert_eq!(
            status(&api, request, &[&host]).await,
            401,
            "`{request}` needs the token"
        );
        let wrong = "Authorization: Bearer not-the-token";
        assert_eq!(
            status(&api, request, &[&host, wrong]).await,
            401,
            "`{request}` needs the right token"
        );
    }

    let anonymous = AdminClient::new(&api.addr);
    let err = anonymous
        .purge_dead_letters("q")
        .await
        .expect_err("a purge without the token is refused");
    assert!(
        matches!(&err, ClientError::Api { status: 401, message } if message.contains("token")),
        "the refusal says a token is missing: {err}"
    );
    let owner = AdminClient::new(&api.addr).with_token(TOKEN);
    let purged = owner
        .purge_dead_letters("q")
        .await
        .expect("the token holder may purge");
    assert_eq!(purged.purged, 0);
}

#[tokio::test]
async fn a_dead_letter_limit_above_the_cap_is_a_bad_request_400_naming_the_cap() {
    let api = api().await;
    let client = AdminClient::new(&api.addr).with_token(TOKEN);
    let err = client
        .dead_letters("q", MAX_DEAD_LIMIT + 1)
        .await
        .expect_err("the limit is capped");
    assert!(
        matches!(&err, ClientError::Api { status: 400, message } if message.contains(&MAX_DEAD_LIMIT.to_string())),
        "the refusal names the cap: {err}"
    );
    client
        .dead_letters("q", MAX_DEAD_LIMIT)
        .await
        .expect("the cap itself is fine");
}

#[test]
fn a_client_command_without_the_hosts_token_is_refused_and_says_why() {
    let host = cli::Host::start(&["email-sender"]);
    let missing = tempfile::tempdir().expect("a temp directory");
    let output = host.cli(&[
        "enqueue",
        "email.SendEmail",
        r#"{"to": "a@example.com"}"#,
        "--admin-token-file",
        missing
            .path()
            .join("no.token")
            .to_str()
            .expect("a UTF-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "refused, not unreachable:\n{stderr}"
    );
    assert!(
        stderr.contains("token"),
        "the error says a token is needed:\n{stderr}"
    );
}

/// The `name=value` of the session cookie that `link`'s login sets.
async fn sign_in(api: &Api, link: &str) -> String {
    let host = format!("Host: {}", api.addr);
    let login = format!("GET {}", link.split_once(&api.addr).expect("the address").1);
    let answer = answer(api, &login, &[&host]).await;
    assert!(
        answer.starts_with("HTTP/1.1 303"),
        "a redirect to the page: {answer}"
    );
    let set_cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("the login sets the session cookie: {answer}"));
    assert!(
        set_cookie.contains("HttpOnly; SameSite=Strict"),
        "{set_cookie}"
    );
    set_cookie.split(';').next().expect("name=value").to_owned()
}

#[tokio::test]
async fn a_login_link_of_the_token_holder_opens_a_session_that_changes_jobs_only_from_its_page() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    let origin = format!("Origin: http://{}", api.addr);
    let err = AdminClient::new(&api.addr)
        .login_link()
        .await
        .expect_err("a login link needs the token");
    assert!(matches!(err, ClientError::Api { status: 401, .. }), "{err}");
    let link = AdminClient::new(&api.addr)
        .with_token(TOKEN)
        .login_link()
        .await
        .expect("the token holder gets a link");
    assert!(
        link.starts_with(&format!("http://{}/?login=", api.addr)),
        "{link}"
    );
    let session = sign_in(&api, &link).await;
    let port = api.addr.rsplit(':').next().expect("a port");
    assert!(
        session.starts_with(&format!("jobhost_session_{port}=")),
        "the cookie's name carries the port: {session}"
    );
    let cookie = format!("Cookie: {session}");

    for read in ["GET /dead/q", "GET /api/overview", "GET /plugins"] {
        assert_eq!(
            status(&api, read, &[&host, &cookie]).await,
            200,
            "`{read}` with the session"
        );
    }
    let purge = "DELETE /dead/q/6f9619ff-8b86-4d01-b42d-00c04fc964ff";
    let replay = "POST /dead/q/6f9619ff-8b86-4d01-b42d-00c04fc964ff/replay";
    for request in [purge, replay] {
        assert_eq!(
            status(&api, request, &[&host, &origin, &cookie]).await,
            404,
            "`{request}` from the page passes the checks (and finds no such letter)"
        );
        assert_eq!(
            status(&api, request, &[&host, &cookie]).await,
            401,
            "no origin"
        );
        assert_eq!(
            status(&api, request, &[&host, &origin]).await,
            401,
            "no cookie"
        );
        let forged = format!("Cookie: jobhost_session_{port}=forged");
        assert_eq!(status(&api, request, &[&host, &origin, &forged]).await, 401);
    }
    assert_eq!(
        status(&api, "POST /api/login", &[&host, &origin, &cookie]).await,
        403,
        "a session cannot mint logins, which would outlive its expiry"
    );

    let login = format!("GET {}", link.split_once(&api.addr).expect("the address").1);
    let again = answer(&api, &login, &[&host]).await;
    assert!(
        again.starts_with("HTTP/1.1 303") && !again.contains("set-cookie"),
        "a used link opens nothing: {again}"
    );
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_after_the_header_read_timeout() {
    let api = api().await;
    let mut stream = TcpStream::connect(&api.addr).await.expect("connects");
    let started = Instant::now();
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n", api.addr).as_bytes())
        .await
        .expect("sends half a head");
    let mut answer = Vec::new();
    let cut = tokio::time::timeout(
        HEADER_READ_TIMEOUT + PATIENCE,
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("the connection is cut in time");
    assert!(
        started.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_millis(500),
        "not before the timeout: {:?}",
        started.elapsed()
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        cut.is_err() || !answer.contains(" 200 "),
        "closed, never answered: {answer}"
    );
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let api = api().await;
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(TcpStream::connect(&api.addr).await.expect("connects"));
    }
    let started = Instant::now();
    let mut waiting = TcpStream::connect(&api.addr)
        .await
        .expect("the kernel queues it");
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        api.addr
    );
    waiting.write_all(request.as_bytes()).await.expect("sends");
    let mut answer = String::new();
    let early =
        tokio::time::timeout(Duration::from_secs(1), waiting.read_to_string(&mut answer)).await;
    assert!(
        early.is_err(),
        "no answer while {MAX_CONNECTIONS} connections are open: {answer}"
    );
    drop(held.pop());
    tokio::time::timeout(PATIENCE, waiting.read_to_string(&mut answer))
        .await
        .expect("an answer once a connection closed")
        .expect("reads");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        started.elapsed() < HEADER_READ_TIMEOUT,
        "answered because one closed, not because the idle ones timed out"
    );
}

#[tokio::test]
async fn the_token_holder_pauses_resumes_and_cancels_with_who_asked_and_nothing_else() {
    let api = api().await;
    let owner = AdminClient::new(&api.addr).with_token(TOKEN);
    let alice = OrderRequest {
        by: Operator::new("alice@ops").expect("an operator"),
    };
    let order = owner
        .pause_queue("q", true, &alice)
        .await
        .expect("the owner pauses a queue of a loaded plugin");
    assert_eq!(order.command, Command::Pause { queue: "q".into() });
    assert_eq!(order.by.as_str(), "alice@ops");
    assert!(api.backend.is_paused("q").await.expect("memory answers"));
    owner
        .pause_queue("q", false, &alice)
        .await
        .expect("and resumes it");
    assert!(!api.backend.is_paused("q").await.expect("memory answers"));
    let job_id = uuid::Uuid::new_v4();
    let order = owner
        .cancel_job(job_id, &alice)
        .await
        .expect("the owner cancels any job id");
    assert_eq!(order.command, Command::Cancel { job_id });

    let err = owner
        .pause_queue("not.loaded", true, &alice)
        .await
        .expect_err("only queues of loaded plugins");
    assert!(
        matches!(&err, ClientError::Api { status: 404, message } if message.contains("not a queue of a loaded plugin")),
        "{err}"
    );
    let host = format!("Host: {}", api.addr);
    let token = format!("Authorization: Bearer {TOKEN}");
    let json = "Content-Type: application/json";
    for (request, body, wanted) in [
        ("POST /jobs/not-a-uuid/cancel", r#"{"by":"a"}"#, 400),
        ("POST /queues/q/pause", r#"{"by":"eve\u001b[2J"}"#, 422),
        ("POST /queues/q/pause", r#"{"by":""}"#, 422),
        ("POST /queues/q/pause", "{}", 422),
    ] {
        let answer = answer_with_body(&api, request, &[&host, &token, json], body).await;
        let code: u16 = answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("an HTTP status line: {answer}"));
        assert_eq!(code, wanted, "`{request}` with `{body}`: {answer}");
    }
    assert!(
        !api.backend.is_paused("q").await.expect("memory answers"),
        "no refused order took effect"
    );
}

/// The whole answer to `request_line` with `headers` and `body`, over a raw connection.
async fn answer_with_body(api: &Api, request_line: &str, headers: &[&str], body: &str) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(&api.addr).await.expect("connects");
        let mut request = format!(
            "{request_line} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).await.expect("sends");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        answer
    };
    tokio::time::timeout(PATIENCE, exchange)
        .await
        .expect("an answer in time")
}
