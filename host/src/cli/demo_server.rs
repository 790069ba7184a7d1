//! The demo's own HTTP server, started by `--demo` on [`DEMO_ADDR`], so the example plugins
//! make real requests with no setup: `plugins/jobhost.toml` grants them this origin.
//!
//! | endpoint | answers |
//! |---|---|
//! | `GET /v1/orders` | `429` with `Retry-After: 1` on its first [`RATE_LIMITED_CALLS`] calls, then `200` |
//! | `GET /v1/flaky` | `503` without `Retry-After` on its first call, then `200` |
//! | `POST /hook` | `204` when `X-Jobhost-Signature` is the HMAC-SHA256 of the body under the key in [`DEMO_KEY_FILE`], else `401` |
//! | anything else | `404` |
//!
//! Each answer is logged, so the log shows the requests beside the host's deferrals and
//! retries. Everything a request carries is bounded before it is logged. If the address is
//! taken, the host says so loudly and runs without the server: those demo jobs then fail
//! as their plugins map a refused connection (retried, then dead-lettered).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use jobhost::files::{self, Rules};
use jobhost::text::{NAME_MAX, bounded};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio_util::task::AbortOnDropHandle;
use tracing::{info, warn};

/// Where the demo server listens; `plugins/jobhost.toml` grants the examples this origin.
pub(super) const DEMO_ADDR: &str = "127.0.0.1:7879";
/// The file of the plugin directory holding the webhook's signing key, which
/// `plugins/jobhost.toml` also gives the `webhook` plugin as its `signing_key` secret.
pub(super) const DEMO_KEY_FILE: &str = "demo-webhook.key";
/// What [`DEMO_KEY_FILE`] must be: a key, not a data set.
const KEY_FILE: Rules = Rules::capped(4096, "a signing key may hold");
/// How many calls of `/v1/orders` are rate limited before it answers.
const RATE_LIMITED_CALLS: u32 = 2;

/// What the handlers share.
struct Demo {
    /// The webhook's signing key.
    key: Vec<u8>,
    /// Calls so far, by endpoint.
    calls: Mutex<HashMap<&'static str, u32>>,
}

impl Demo {
    /// Counts a call of `endpoint`; returns its 1-based number.
    fn call(&self, endpoint: &'static str) -> u32 {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let count = calls.entry(endpoint).or_default();
        *count += 1;
        *count
    }
}

/// Starts the server for the plugin directory `dir`; it serves until the handle drops.
/// `None`, after a loud warning, when [`DEMO_ADDR`] cannot be bound.
pub(super) async fn start(dir: &Path) -> Option<AbortOnDropHandle<()>> {
    let listener = match TcpListener::bind(DEMO_ADDR).await {
        Ok(listener) => listener,
        Err(err) => {
            let rule = "=".repeat(78);
            warn!("{rule}");
            warn!("THE DEMO HTTP SERVER IS NOT RUNNING: cannot listen on {DEMO_ADDR}: {err}.");
            warn!("Is another `jobhost dev --demo` running? Stop it, or free the port.");
            warn!("Until then the demo's api.CallApi and webhook.Deliver jobs fail to connect.");
            warn!("{rule}");
            return None;
        }
    };
    let key_file = dir.join(DEMO_KEY_FILE);
    let key = match files::read_async(&key_file, KEY_FILE).await {
        Ok(key) => key.trim_ascii_end().to_vec(),
        Err(err) => {
            warn!(file = %key_file.display(), error = %err, "no demo signing key; the demo webhook receiver refuses every delivery");
            Vec::new()
        }
    };
    let demo = Arc::new(Demo {
        key,
        calls: Mutex::default(),
    });
    let app = Router::new()
        .route("/v1/orders", get(orders))
        .route("/v1/flaky", get(flaky))
        .route("/hook", post(hook))
        .fallback(not_found)
        .with_state(demo);
    info!("demo HTTP server listening on http://{DEMO_ADDR}: the example plugins call it");
    Some(AbortOnDropHandle::new(tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            warn!(error = %err, "the demo HTTP server stopped");
        }
    })))
}

/// Rate limited on its first calls, as a busy API is.
async fn orders(State(demo): State<Arc<Demo>>) -> Response {
    let call = demo.call("orders");
    if call <= RATE_LIMITED_CALLS {
        info!(
            call,
            "demo server: GET /v1/orders answered 429 Too Many Requests, Retry-After: 1"
        );
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "rate limited: come back in a second",
        )
            .into_response();
    }
    info!(call, "demo server: GET /v1/orders answered 200 OK");
    (StatusCode::OK, r#"{"orders":[1001,1002]}"#).into_response()
}

/// Unavailable once, without saying for how long.
async fn flaky(State(demo): State<Arc<Demo>>) -> Response {
    let call = demo.call("flaky");
    if call == 1 {
        info!(
            call,
            "demo server: GET /v1/flaky answered 503 Service Unavailable, no Retry-After"
        );
        return (StatusCode::SERVICE_UNAVAILABLE, "warming up").into_response();
    }
    info!(call, "demo server: GET /v1/flaky answered 200 OK");
    (StatusCode::OK, r#"{"status":"ok"}"#).into_response()
}

/// A webhook receiver: checks the signature, then logs what it got.
async fn hook(State(demo): State<Arc<Demo>>, headers: HeaderMap, body: Bytes) -> Response {
    let signature = headers
        .get("x-jobhost-signature")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !signed_by(&demo.key, &body, signature) {
        warn!(
            signature = %bounded(signature, NAME_MAX),
            "demo server: POST /hook answered 401 Unauthorized: the signature does not match"
        );
        return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
    }
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let field = |name: &str| bounded(event[name].as_str().unwrap_or("?"), NAME_MAX).into_owned();
    info!(
        event = %field("event"),
        id = %field("id"),
        bytes = body.len(),
        "demo server: POST /hook received a webhook with a valid signature, answered 204"
    );
    StatusCode::NO_CONTENT.into_response()
}

async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

/// Whether `signature` is `sha256=` and the hex HMAC-SHA256 of `body` under `key`,
/// compared in constant time.
fn signed_by(key: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(digest) = signature.strip_prefix("sha256=").and_then(hex) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&digest).is_ok()
}

/// The bytes of lowercase or uppercase hex `text`.
fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_valid_only_for_its_body_and_key() {
        let key = b"key";
        let body = b"The quick brown fox jumps over the lazy dog";
        let good = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8";
        assert!(signed_by(key, body, good));
        assert!(signed_by(
            key,
            body,
            &good.to_uppercase().replace("SHA256=", "sha256=")
        ));
        assert!(!signed_by(b"other", body, good), "another key");
        assert!(!signed_by(key, b"another body", good));
        for malformed in ["", "sha256=", "sha1=f7bc", "sha256=zz", "sha256=f7b"] {
            assert!(!signed_by(key, body, malformed), "{malformed:?}");
        }
    }
}
