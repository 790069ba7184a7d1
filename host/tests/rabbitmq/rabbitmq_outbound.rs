//! Outbound HTTP through the worker on RabbitMQ: a server that answers `429` with
//! `Retry-After: 2` makes the job wait 2 s in a hold queue of the broker and come back on
//! the same attempt, one deferral more, and complete.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobhost::grants::Grants;
use serde_json::json;

use crate::support::outbound::Server;
use crate::support::worker::{Running, eventually, fixture_queues, publish};
use crate::support::{PATIENCE, backend, raw_channel, ready, unique};

/// What `Retry-After` asks for.
const RETRY_AFTER: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_brings_the_job_back_that_much_later_on_the_same_attempt() {
    let _cleanup = fixture_queues(&["test.http_probe"]).await;
    let Some(backend) = backend(&unique("outbound-429")).await.map(Arc::new) else {
        return;
    };
    let server = Server::start().await;
    let grants = Grants::parse(
        Path::new("plugins/jobhost.toml"),
        &format!(
            "[plugins.http-probe]\nallowed_outbound_hosts = [\"{}\"]\n",
            server.origin()
        ),
    )
    .expect("the test's grants are valid");
    let running = Running::start_granted(backend.clone(), "http-probe", grants).await;
    let url = server.url("/busy-once");
    let job = publish(
        &backend,
        "probe.Fetch",
        "test.http_probe",
        json!({"url": url}),
    )
    .await;

    let log = running.log.clone();
    eventually(
        RETRY_AFTER + PATIENCE,
        "the deferred job to come back and complete",
        || async { log.calls_of(&url).len() == 2 },
    )
    .await;
    let calls = log.calls_of(&url);
    assert!(
        calls.iter().all(|call| call.job_id == job.job_id),
        "one job"
    );
    assert!(
        calls[0]
            .outcome
            .starts_with("job deferred for 2s: 429 from"),
        "the 429 deferred the job: {}",
        calls[0].outcome
    );
    assert_eq!(calls[1].outcome, "ok", "the second run completed");
    assert_eq!(
        calls
            .iter()
            .map(|call| (call.attempt, call.deferrals))
            .collect::<Vec<_>>(),
        vec![(1, 0), (1, 1)],
        "the deferral spent no attempt and was counted as a deferral"
    );
    let waited = calls[1].started - calls[0].started;
    assert!(
        waited >= RETRY_AFTER && waited < RETRY_AFTER + PATIENCE,
        "the job came back after the server's Retry-After: {waited:?}"
    );
    assert_eq!(server.requests(), 2, "one request per run");

    let hold = raw_channel().await;
    eventually(PATIENCE, "the work queue to drain", || async {
        ready(&hold, "test.http_probe").await == 0
    })
    .await;
    running.stop().await;
    backend.close().await;
}
