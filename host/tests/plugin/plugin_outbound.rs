//! Outbound HTTP of plugins under the operator's grants, against local servers the tests
//! start: what is granted goes through, what is not fails in the guest with a message
//! naming the grant that would allow it, and nothing leaves the host for it.

use std::time::{Duration, Instant};

use jobhost::job::Outcome;
use jobhost_sdk::JobError;

use crate::support::outbound::{
    EarlyAnswer, Server, Watch, bytes_read, failure, fetch, granted, probe_granted, report, run,
    send,
};

fn grants(origins: &[String], extra: &str) -> String {
    format!("[plugins.http-probe]\nallowed_outbound_hosts = {origins:?}\n{extra}")
}

#[tokio::test]
async fn a_granted_request_reaches_the_server_and_the_guest_reads_its_answer() {
    let server = Server::start().await;
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    let report = report(fetch(&probe, &server.url("/ok"), false).await);
    assert_eq!(report["status"], 200);
    assert_eq!(report["body"], "hello");
    assert_eq!(
        server.requests(),
        1,
        "the server answered exactly one request"
    );
}

#[tokio::test]
async fn a_request_to_an_origin_not_granted_fails_naming_the_grant_and_never_connects() {
    let server = Server::start().await;
    let denied = Watch::start();
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    let message = failure(fetch(&probe, &denied.url("/steal"), false).await);
    assert_eq!(
        message,
        format!(
            "outbound request to `http://{0}` is not allowed for plugin `http-probe`; to \
             allow it add \"http://{0}\" to allowed_outbound_hosts under \
             [plugins.http-probe] in the grants file jobhost.toml",
            denied.addr
        )
    );
    assert!(denied.saw_nothing(), "a denied request must not connect");
}

#[tokio::test]
async fn a_plugin_without_grants_still_links_and_every_request_is_refused() {
    let denied = Watch::start();
    let (_engine, probe) = probe_granted("").await;
    let message = failure(fetch(&probe, &denied.url("/"), false).await);
    assert!(
        message.contains("is not allowed for plugin `http-probe`"),
        "{message}"
    );
    assert!(denied.saw_nothing(), "deny by default: nothing connects");
}

#[tokio::test]
async fn a_redirect_to_an_origin_not_granted_is_not_fetched() {
    let server = Server::start().await;
    let denied = Watch::start();
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    let redirect = server.url(&format!("/redirect?to={}", denied.url("/secret")));

    // `wasi:http` itself follows no redirect: the guest sees the 302.
    let seen = report(fetch(&probe, &redirect, false).await);
    assert_eq!(seen["status"], 302);
    assert_eq!(seen["location"], denied.url("/secret"));

    // A guest that follows it sends a new request, which the grants refuse.
    let message = failure(fetch(&probe, &redirect, true).await);
    assert!(
        message.starts_with(&format!(
            "outbound request to `http://{}` is not allowed for plugin `http-probe`",
            denied.addr
        )),
        "{message}"
    );
    assert!(
        denied.saw_nothing(),
        "the redirect's target must not be reached"
    );
    assert_eq!(
        server.requests(),
        2,
        "only the two requests to the granted origin"
    );
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_through_a_wildcard_grant() {
    let denied = Watch::start();
    let port = denied.addr.port();
    let (_engine, probe) = probe_granted(&grants(&[format!("http://*:{port}")], "")).await;
    let message = failure(fetch(&probe, &format!("http://localhost:{port}/"), false).await);
    assert!(
        message.starts_with(&format!(
            "outbound request to `http://localhost:{port}` is not allowed for plugin \
             `http-probe`: `localhost` resolves to "
        )),
        "{message}"
    );
    assert!(message.contains("a loopback address"), "{message}");
    assert!(
        denied.saw_nothing(),
        "a refused address must not be connected to"
    );
}

#[tokio::test]
async fn loopback_is_reachable_through_a_grant_that_names_it() {
    let server = Server::start().await;
    let port = server.addr.port();
    let (_engine, probe) = probe_granted(&grants(&[format!("http://localhost:{port}")], "")).await;
    let report = report(fetch(&probe, &format!("http://localhost:{port}/ok"), false).await);
    assert_eq!(report["body"], "hello");
}

#[tokio::test]
async fn a_slow_server_is_cut_at_the_request_timeout() {
    let server = Server::start().await;
    let (_engine, probe) =
        probe_granted(&grants(&[server.origin()], "request_timeout = \"300ms\"\n")).await;
    let started = Instant::now();
    let message = failure(fetch(&probe, &server.url("/slow"), false).await);
    let took = started.elapsed();
    assert_eq!(
        message, "ErrorCode::ConnectionReadTimeout",
        "the guest sees a timeout"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "cut at the 300 ms request timeout, took {took:?}"
    );
}

#[tokio::test]
async fn a_slow_server_is_cut_at_the_jobs_deadline_when_that_comes_first() {
    let server = Server::start().await;
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    let payload = serde_json::json!({"url": server.url("/slow")});
    let started = Instant::now();
    let outcome = run(&probe, "probe.Fetch", &payload, Duration::from_secs(1)).await;
    let took = started.elapsed();
    let cut = match &outcome {
        Outcome::Failed(JobError::Retryable(message)) => {
            message == "ErrorCode::ConnectionReadTimeout"
        }
        Outcome::Crashed(reason) => reason.starts_with("job timed out after"),
        _ => false,
    };
    assert!(
        cut,
        "the request ends with the job's 1 s deadline: {outcome:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "not the 30 s request timeout: {took:?}"
    );
}

#[tokio::test]
async fn an_upload_the_server_answered_early_is_cut_at_the_request_timeout() {
    let server = EarlyAnswer::start().await;
    let toml = format!(
        "[plugins.httpflood]\nallowed_outbound_hosts = [\"http://{}\"]\nrequest_timeout = \"1s\"\n",
        server.addr
    );
    let (_engine, flood) = granted("httpflood", &toml).await;
    let payload = serde_json::json!({"url": server.url("/upload")});
    let started = Instant::now();
    let outcome = run(
        &flood,
        "httpflood.Upload",
        &payload,
        Duration::from_secs(20),
    )
    .await;
    let took = started.elapsed();
    let message = failure(outcome);
    assert!(
        message.starts_with("the upload was cut after the answer"),
        "the guest's upload ends after the answer came: {message}"
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "cut at the 1 s request timeout, not the job's 20 s: {took:?}"
    );
    assert!(server.bytes_read() > 0, "the upload reached the server");
}

#[tokio::test]
async fn a_429_with_retry_after_defers_the_job_by_that_long() {
    let server = Server::start().await;
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    match fetch(&probe, &server.url("/too-many"), false).await {
        Outcome::Failed(JobError::Deferred { delay, .. }) => {
            assert_eq!(delay, Duration::from_secs(2));
        }
        other => panic!("a 429 must defer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_body_longer_than_the_cap_fails_at_the_cap() {
    let server = Server::start().await;
    let (_engine, probe) =
        probe_granted(&grants(&[server.origin()], "max_response_bytes = 100000\n")).await;
    let message = failure(fetch(&probe, &server.url("/gib"), false).await);
    let read = bytes_read(&message);
    assert!(
        read <= 100_000,
        "at most the cap reaches the guest: {message}"
    );
    assert!(
        message.ends_with("HTTP response body size exceeds limit: 100000 bytes"),
        "{message}"
    );
}

#[tokio::test]
async fn a_plugin_has_at_most_max_concurrent_requests_in_flight_across_its_jobs() {
    let server = Server::start().await;
    let (_engine, probe) =
        probe_granted(&grants(&[server.origin()], "max_concurrent_requests = 1\n")).await;
    let url = server.url("/hold");
    let jobs = (0..3).map(|_| fetch(&probe, &url, false));
    for outcome in futures_util::future::join_all(jobs).await {
        assert_eq!(report(outcome)["body"], "held", "every job gets its answer");
    }
    assert_eq!(
        server.most_held_at_once(),
        1,
        "three jobs at once, one request in flight at a time"
    );
}

#[tokio::test]
async fn an_sdk_body_goes_with_its_length_to_a_server_that_refuses_chunked_bodies() {
    let server = Server::start().await;
    let (_engine, probe) = probe_granted(&grants(&[server.origin()], "")).await;
    for method in ["PUT", "POST"] {
        let report = report(send(&probe, method, &server.url("/sized"), "hello").await);
        assert_eq!(report["status"], 200, "{method}");
        assert_eq!(report["body"], "got 5 bytes", "{method}");
    }
    let report = report(send(&probe, "POST", &server.url("/sized"), "").await);
    assert_eq!(
        report["body"], "got 0 bytes",
        "an empty POST says its length too"
    );
}

#[tokio::test]
async fn an_sdk_response_larger_than_the_cap_is_fatal_and_not_retried() {
    let server = Server::start().await;
    let (_engine, probe) =
        probe_granted(&grants(&[server.origin()], "max_response_bytes = 100000\n")).await;
    match send(&probe, "GET", &server.url("/gib"), "").await {
        Outcome::Failed(JobError::Fatal(reason)) => assert_eq!(
            reason,
            format!(
                "GET {} got a response body larger than the operator allows (100000 bytes): \
                 `max_response_bytes` in `jobhost.toml`",
                server.url("/gib")
            )
        ),
        other => panic!("a body over the cap is fatal, got {other:?}"),
    }
    assert_eq!(server.requests(), 1);
}
