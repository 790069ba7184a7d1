//! Example plugin: `webhook.Deliver` on queue `examples.webhooks` POSTs a JSON event to the
//! endpoint the operator configured, signed so the receiver knows it came from us: the
//! canonical job-queue use of outbound HTTP.
//!
//! Configuration (`[plugins.webhook]` in `jobhost.toml`):
//! - `endpoint`, a config value: the URL to POST to; its origin must be in the plugin's
//!   `allowed_outbound_hosts`;
//! - `signing_key`, a secret: the HMAC key shared with the receiver.
//!
//! The request carries the body `{"id", "event", "data"}` and the headers
//! `X-Jobhost-Signature: sha256=<hex HMAC-SHA256 of the body>` and `X-Jobhost-Delivery:
//! <id>`. The id is the job id, the same on every retry: delivery is at least once, so the
//! receiver drops an id it has seen. What the receiver answers decides the job as
//! `Response::job_result` does: 2xx delivered, 429/503 with `Retry-After` deferred for that
//! long, other 5xx and timeouts retried with backoff, other 4xx dead-lettered.

use hmac::{Hmac, Mac};
use jobhost_sdk::http;
use jobhost_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "examples")]
enum WebhookQueues {
    #[queue(retry(max_attempts = 5, backoff = "exponential", base = "1s", max = "1m"))]
    Webhooks,
}

/// An event to deliver.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "webhook.Deliver", queue = WebhookQueues::Webhooks)]
struct Deliver {
    /// What happened, e.g. `order.created`.
    event: String,
    /// Its details, passed on byte for byte (raw JSON: never parsed into a tree).
    data: Box<RawValue>,
}

/// The body the receiver gets.
#[derive(Debug, Serialize)]
struct Delivery<'a> {
    id: &'a str,
    event: &'a str,
    data: &'a RawValue,
}

/// The header carrying the body's signature.
const SIGNATURE_HEADER: &str = "X-Jobhost-Signature";

/// `sha256=` and the lowercase hex HMAC-SHA256 of `body` under `key`.
fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256={hex}")
}

fn deliver(job: Deliver, ctx: &JobContext) -> Result<(), JobError> {
    let endpoint = jobhost_sdk::config::require("endpoint")?;
    let key = jobhost_sdk::config::require("signing_key")?;
    let body = serde_json::to_vec(&Delivery {
        id: ctx.job_id(),
        event: &job.event,
        data: &job.data,
    })
    .fatal()?;
    let response = http::post(&endpoint)
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, sign(key.as_bytes(), &body))
        .header("X-Jobhost-Delivery", ctx.job_id())
        .body(body)
        .send()?;
    response.job_result()?;
    ctx.log(
        Level::Info,
        "webhook delivered",
        &[
            ("event", &job.event),
            ("status", &response.status()),
            ("attempt", &ctx.attempt()),
        ],
    );
    Ok(())
}

jobhost_sdk::plugin!(queues = WebhookQueues, jobs = { Deliver => deliver });

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use jobhost_sdk::http::{Request, Response};
    use jobhost_sdk::testing::{HandlerRun, TEST_JOB_ID, TestContext};

    use super::*;

    const ENDPOINT: &str = "http://hooks.test/in";

    fn order_created() -> Deliver {
        Deliver {
            event: "order.created".to_owned(),
            data: RawValue::from_string(r#"{"order": 42}"#.to_owned()).expect("JSON"),
        }
    }

    /// Delivers `order.created` to a receiver answering `response`.
    fn deliver_to(response: Response) -> HandlerRun {
        let response = Arc::new(response);
        TestContext::new()
            .config("endpoint", ENDPOINT)
            .config("signing_key", "k3y")
            .respond_with(move |_: &Request| Ok((*response).clone()))
            .run(deliver, order_created())
    }

    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body_in_hex() {
        // RFC 4231-style check with the well-known "quick brown fox" vector.
        assert_eq!(
            sign(b"key", b"The quick brown fox jumps over the lazy dog"),
            "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }

    #[test]
    fn an_event_is_posted_as_json_signed_with_the_configured_key() {
        let run = deliver_to(Response::new(204));
        assert_eq!(run.result, Ok(()));
        let [request] = run.requests.as_slice() else {
            panic!("one request, not {:?}", run.requests);
        };
        assert_eq!(request.method(), http::Method::Post);
        assert_eq!(request.url(), ENDPOINT);
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("x-jobhost-delivery"), Some(TEST_JOB_ID));
        let body: serde_json::Value = serde_json::from_slice(request.body()).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"id": TEST_JOB_ID, "event": "order.created", "data": {"order": 42}})
        );
        assert_eq!(
            request.header("x-jobhost-signature"),
            Some(sign(b"k3y", request.body()).as_str()),
            "the receiver recomputes it over the exact bytes it got"
        );
        assert_eq!(run.logs[0].message, "webhook delivered");
        assert_eq!(run.logs[0].field("status"), Some("204"));
    }

    #[test]
    fn a_receiver_that_is_down_is_retried_and_one_that_refuses_is_a_dead_letter() {
        assert!(matches!(
            deliver_to(Response::new(502)).result,
            Err(JobError::Retryable(_))
        ));
        assert_eq!(
            deliver_to(Response::new(401).with_body("bad signature")).result,
            Err(JobError::fatal(
                "POST http://hooks.test/in answered 401 Unauthorized: bad signature"
            ))
        );
    }

    #[test]
    fn a_receiver_asking_to_slow_down_defers_the_delivery() {
        let run = deliver_to(Response::new(429).with_header("Retry-After", "30"));
        assert!(
            matches!(run.result, Err(JobError::Deferred { delay, .. }) if delay == Duration::from_secs(30)),
            "{:?}",
            run.result
        );
    }

    #[test]
    fn without_a_signing_key_nothing_is_sent_and_the_job_says_what_is_missing() {
        let run = TestContext::new()
            .config("endpoint", ENDPOINT)
            .respond_with(|_: &Request| Ok(Response::new(204)))
            .run(deliver, order_created());
        assert!(
            matches!(&run.result, Err(JobError::Fatal(msg)) if msg.contains("`signing_key`")),
            "{:?}",
            run.result
        );
        assert!(run.requests.is_empty());
    }
}
