//! A plugin's request slots: by default as many as the host runs jobs, so a plugin granted
//! an origin is not throttled below the host's concurrency; under a lower limit the
//! operator sets, the wait for a slot spends the job's time, not the request's timeout.

use crate::support::outbound::{Server, fetch, probe_granted, report};

fn grants(origin: &str, extra: &str) -> String {
    format!("[plugins.http-probe]\nallowed_outbound_hosts = [{origin:?}]\n{extra}")
}

/// The jobs the test engine runs at once (`test_config`: 8 pool slots, one kept for loads).
const JOBS: usize = 7;

#[tokio::test]
async fn a_plugin_without_a_request_limit_has_a_request_in_flight_per_running_job() {
    let server = Server::start().await;
    let (engine, probe) = probe_granted(&grants(&server.origin(), "")).await;
    assert_eq!(engine.config().max_instances as usize - 1, JOBS);
    let url = server.url("/hold");
    let jobs = (0..JOBS).map(|_| fetch(&probe, &url, false));
    for outcome in futures_util::future::join_all(jobs).await {
        assert_eq!(report(outcome)["body"], "held", "every job gets its answer");
    }
    let most = server.most_held_at_once();
    assert!(
        most > 4 && most <= JOBS,
        "{JOBS} jobs at once, each with its request in flight (the old default allowed 4): \
         {most} held at once"
    );
}

#[tokio::test]
async fn the_wait_for_a_request_slot_is_not_counted_in_the_request_timeout() {
    let server = Server::start().await;
    // Each `/hold` takes 300 ms: the third job waits about 600 ms for the one slot, longer
    // than its request may take, and still gets its answer within its job's 30 s.
    let (_engine, probe) = probe_granted(&grants(
        &server.origin(),
        "max_concurrent_requests = 1\nrequest_timeout = \"500ms\"\n",
    ))
    .await;
    let url = server.url("/hold");
    let jobs = (0..3).map(|_| fetch(&probe, &url, false));
    for outcome in futures_util::future::join_all(jobs).await {
        assert_eq!(report(outcome)["body"], "held", "every job gets its answer");
    }
    assert_eq!(server.most_held_at_once(), 1, "one request at a time");
}
