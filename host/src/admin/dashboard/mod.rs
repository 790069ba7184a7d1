//! The web dashboard, served by the admin API at `/`: one page whose HTML, CSS and
//! script are built into the binary (no CDN, no build step), fed by `GET /api/overview`
//! and the live stream `GET /api/events`, and using the admin API's own dead-letter routes
//! for replays and purges.
//!
//! # Contract
//! - **Live updates** come as Server-Sent Events: one `overview` event
//!   ([`Overview`]) every [`STREAM_EVERY`] per open page, at most [`MAX_STREAMS`] pages at
//!   once. SSE rather than polling, because one long response per page costs the host a
//!   timer rather than a request per tick, and the browser reconnects by itself after a
//!   host restart. Streams end when the host shuts down.
//! - **Broker cost** is bounded whatever the number of pages and scrapers: queue depths
//!   are read at most once per [`DEPTH_MAX_AGE`] (one passive declaration per work queue,
//!   dead-letter queue and known hold queue), each reading bounded by [`DEPTH_TIMEOUT`].
//!   `GET /metrics` sets `jobhost_hold_queue_messages` from the same reading at each scrape.
//! - **Access** is the admin API's ([`AdminAccess`](super::AdminAccess)): reading needs no
//!   token, and replays and purges need the session the login link opens
//!   (`GET /?token=LOGIN` sets the cookie and redirects to `/`, so the token leaves the
//!   address bar and the history at once).
//! - **Hostile text**: every string from a plugin or a producer is put on the page as
//!   text (`textContent`), never as markup, and the page's `Content-Security-Policy`
//!   allows only its own script and style.

mod overview;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, LOCATION, REFERRER_POLICY,
    SET_COOKIE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::AdminBackend;
use super::server::{AdminState, ApiError};
use crate::metrics;
use crate::text::{NAME_MAX, bounded};
use overview::Depths;
pub use overview::{DEPTH_MAX_AGE, DEPTH_TIMEOUT, Overview, QueueOverview};

/// How often an open page gets a fresh [`Overview`].
pub const STREAM_EVERY: Duration = Duration::from_secs(1);
/// How many pages may follow the stream at once; more get `503`.
pub const MAX_STREAMS: usize = 16;

const INDEX: &str = include_str!("assets/index.html");
const STYLE: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");

/// Only the page's own files, no framing, and nothing sent anywhere but to this host.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// What the dashboard's routes serve from.
struct Live<B> {
    admin: Arc<AdminState<B>>,
    depths: Depths,
    streams: Arc<Semaphore>,
    shutdown: CancellationToken,
}

type Shared<B> = State<Arc<Live<B>>>;

/// The dashboard's routes and `GET /metrics`; their streams end at `shutdown`.
pub(super) fn routes<B: AdminBackend>(
    admin: Arc<AdminState<B>>,
    shutdown: CancellationToken,
) -> Router {
    let live = Live {
        admin,
        depths: Depths::default(),
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        shutdown,
    };
    Router::new()
        .route("/", get(page::<B>))
        .route("/assets/{file}", get(asset))
        .route("/api/session", get(session::<B>))
        .route("/api/overview", get(overview_now::<B>))
        .route("/api/events", get(events::<B>))
        .route("/metrics", get(scrape::<B>))
        .with_state(Arc::new(live))
}

impl<B: AdminBackend> Live<B> {
    async fn overview(&self) -> Overview {
        let registry = self.admin.plugins.current();
        let queues = overview::queue_names(&registry);
        let reading = self.depths.read(&self.admin.backend, queues).await;
        overview::overview(
            B::KIND,
            &registry,
            &self.admin.grants.current(),
            &self.admin.metrics,
            &reading,
        )
    }
}

#[derive(Debug, Deserialize)]
struct Login {
    token: Option<String>,
}

/// The page; with `?token=`, a login: the session cookie if the token is the current
/// login token, then a redirect to `/`.
async fn page<B: AdminBackend>(
    State(live): Shared<B>,
    Query(login): Query<Login>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = login.token else {
        let headers = [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CONTENT_SECURITY_POLICY, PAGE_POLICY),
            (REFERRER_POLICY, "no-referrer"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (CACHE_CONTROL, "no-store"),
        ];
        return (headers, INDEX).into_response();
    };
    let access = &live.admin.access;
    let to_page = [(LOCATION, "/"), (REFERRER_POLICY, "no-referrer")];
    let Some(cookie) = access.redeem(&token) else {
        warn!(
            "a dashboard login link was refused: used already or wrong; the page opens read-only"
        );
        return (StatusCode::SEE_OTHER, to_page).into_response();
    };
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let next = access.login_link(&bounded(host, NAME_MAX));
    info!("dashboard: logged in; the link for the next browser: {next}");
    (StatusCode::SEE_OTHER, [(SET_COOKIE, cookie)], to_page).into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        "dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let headers = [
        (CONTENT_TYPE, kind),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}

/// `GET /api/session`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// Whether this browser holds the session that replays and purges.
    pub can_change: bool,
}

async fn session<B: AdminBackend>(State(live): Shared<B>, headers: HeaderMap) -> Json<SessionView> {
    Json(SessionView {
        can_change: live.admin.access.has_session(&headers),
    })
}

async fn overview_now<B: AdminBackend>(State(live): Shared<B>) -> Json<Overview> {
    Json(live.overview().await)
}

async fn events<B: AdminBackend>(
    State(live): Shared<B>,
) -> Result<Sse<impl Stream<Item = Result<Event, axum::Error>>>, ApiError> {
    let permit = Arc::clone(&live.streams).try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} dashboard pages follow the host already; close one"),
        )
    })?;
    let ticks = tokio::time::interval(STREAM_EVERY);
    Ok(Sse::new(futures_util::stream::unfold(
        (live, ticks, permit),
        next_event,
    )))
}

/// The next tick's overview as an event; none once the host shuts down.
async fn next_event<B: AdminBackend>(
    (live, mut ticks, permit): (Arc<Live<B>>, tokio::time::Interval, OwnedSemaphorePermit),
) -> Option<(
    Result<Event, axum::Error>,
    (Arc<Live<B>>, tokio::time::Interval, OwnedSemaphorePermit),
)> {
    tokio::select! {
        () = live.shutdown.cancelled() => return None,
        _ = ticks.tick() => {}
    }
    let event = Event::default()
        .event("overview")
        .json_data(live.overview().await);
    Some((event, (live, ticks, permit)))
}

async fn scrape<B: AdminBackend>(State(live): Shared<B>) -> impl IntoResponse {
    let registry = live.admin.plugins.current();
    let queues = overview::queue_names(&registry);
    let reading = live.depths.read(&live.admin.backend, queues).await;
    overview::export_holds(&live.admin.metrics, &reading);
    (
        [(CONTENT_TYPE, metrics::CONTENT_TYPE)],
        live.admin.metrics.encode(),
    )
}
