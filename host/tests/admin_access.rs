//! The admin API answers only its owner: each refusal with its status, and the token
//! holder's requests going through. The CLI's use of the token is in `cli_run.rs` (its
//! commands pass the token unchanged) and in the last test here.

mod cli_support;

use std::time::Duration;

use jobhost::admin::{self, AdminAccess, AdminClient, AdminState, ClientError, MAX_DEAD_LIMIT};
use jobhost::broker::MemoryBackend;
use jobhost::grants::SharedGrants;
use jobhost::metrics::Metrics;
use jobhost::policy::Granularity;
use jobhost::worker::Plugins;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "the-test-token";
const PATIENCE: Duration = Duration::from_secs(10);

/// A running admin API on the memory backend, stopped when dropped.
struct Api {
    addr: String,
    access: AdminAccess,
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
    let state = AdminState {
        backend: MemoryBackend::new(),
        plugins: Plugins::new(),
        granularity: Granularity::default(),
        access: access.clone(),
        metrics: Metrics::new(),
        grants: SharedGrants::default(),
    };
    let stop = CancellationToken::new();
    tokio::spawn(admin::serve(listener, state, stop.clone()));
    Api {
        addr: bound.to_string(),
        access,
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
    let exchange = async {
        let mut stream = TcpStream::connect(&api.addr).await.expect("connects");
        let mut request =
            format!("{request_line} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n");
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.expect("sends");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        answer
    };
    tokio::time::timeout(PATIENCE, exchange)
        .await
        .expect("an answer in time")
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
    ] {
        let code = status(&api, "GET /plugins", &[&host, browser]).await;
        assert_eq!(code, 403, "`{browser}` is refused");
    }
    let own = format!("Origin: http://{}", api.addr);
    assert_eq!(status(&api, "GET /plugins", &[&host, &own]).await, 200);
}

#[tokio::test]
async fn mutating_requests_without_the_token_are_unauthorized_401() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    for request in ["POST /jobs", "POST /dead/q/replay", "DELETE /dead/q"] {
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
    anonymous
        .dead_letters("q", 10)
        .await
        .expect("reading needs no token");

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
    let client = AdminClient::new(&api.addr);
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
    let host = cli_support::Host::start(&["email-sender"]);
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

#[tokio::test]
async fn the_dashboard_login_link_opens_a_session_that_changes_jobs_only_from_its_page() {
    let api = api().await;
    let host = format!("Host: {}", api.addr);
    let origin = format!("Origin: http://{}", api.addr);
    let link = api.access.login_link(&api.addr);
    let login = format!("GET {}", link.split_once(&api.addr).expect("the address").1);
    let first = answer(&api, &login, &[&host]).await;
    assert!(
        first.starts_with("HTTP/1.1 303"),
        "a redirect to the page: {first}"
    );
    let set_cookie = first
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("the login sets the session cookie: {first}"));
    assert!(
        set_cookie.contains("HttpOnly; SameSite=Strict"),
        "{set_cookie}"
    );
    let cookie = format!(
        "Cookie: {}",
        set_cookie.split(';').next().expect("name=value")
    );

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
        let forged = "Cookie: jobhost_session=forged";
        assert_eq!(status(&api, request, &[&host, &origin, forged]).await, 401);
    }

    let again = answer(&api, &login, &[&host]).await;
    assert!(
        again.starts_with("HTTP/1.1 303") && !again.contains("set-cookie"),
        "a used link opens nothing: {again}"
    );
}
