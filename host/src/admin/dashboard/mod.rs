//! The web dashboard, served by the admin API at `/`: one page whose HTML, CSS and
//! script are built into the binary (no CDN, no build step), fed by `GET /api/overview`
//! and the live stream `GET /api/events`, and using the admin API's own dead-letter routes
//! for replays and purges.
//!
//! # Contract
//! - **Live updates** come as Server-Sent Events: one `overview` event
//!   ([`Overview`]) every [`STREAM_EVERY`] per open page, at most
//!   [`MAX_STREAMS_PER_CALLER`] pages per session (and as many for the token holder), so
//!   no one takes every slot; more get `503`. SSE rather than polling, because one long
//!   response per page costs the host a timer rather than a request per tick, and the
//!   browser reconnects by itself after a host restart. Streams end when the host shuts
//!   down or their session expires.
//! - **Broker cost** is bounded whatever the number of pages and scrapers: queue depths
//!   are read at most once per [`DEPTH_MAX_AGE`] (one passive declaration per work queue,
//!   dead-letter queue and known hold queue), each reading bounded by [`DEPTH_TIMEOUT`].
//!   `GET /metrics` sets `jobhost_hold_queue_messages` from the same reading at each scrape.
//! - **Access** is the admin API's ([`AdminAccess`](super::AdminAccess)): the page and its
//!   files are open, and show nothing until signed in; the overview, the stream and the
//!   dead letters need a session, which a link of `jobhost dashboard` opens
//!   (`POST /api/login` with the token mints it; `GET /?login=LOGIN` sets the cookie and
//!   redirects to `/`, so the login token leaves the address bar and the history at once).
//! - **Hostile text**: every string from a plugin or a producer is put on the page as
//!   text (`textContent`), never as markup, and the page's `Content-Security-Policy`
//!   allows only its own script and style.

mod overview;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::AdminBackend;
use super::access::Caller;
use super::error::ApiError;
use super::session::{LOGIN_LIFETIME, SESSION_LIFETIME};
use super::state::AdminState;
use crate::metrics;
use overview::Depths;
pub use overview::{BATCHES_SHOWN, DEPTH_MAX_AGE, DEPTH_TIMEOUT, Overview, QueueOverview};

/// How often an open page gets a fresh [`Overview`].
pub const STREAM_EVERY: Duration = Duration::from_secs(1);
/// How many pages of one session (or of the token holder) may follow the stream at once;
/// more get `503`.
pub const MAX_STREAMS_PER_CALLER: usize = 4;

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
    /// How many streams each caller follows.
    streams: Arc<Mutex<HashMap<Caller, usize>>>,
    shutdown: CancellationToken,
}

type Shared<B> = State<Arc<Live<B>>>;

/// The dashboard's routes and `GET /metrics`, in the two groups of the admin API's
/// router.
pub(super) struct Routes {
    /// The page, its files, `GET /api/session` and `GET /metrics`.
    pub(super) open: Router,
    /// The overview, the stream and `POST /api/login`, which need a caller.
    pub(super) private: Router,
}

/// The dashboard's routes; their streams end at `shutdown`.
pub(super) fn routes<B: AdminBackend>(
    admin: Arc<AdminState<B>>,
    shutdown: CancellationToken,
) -> Routes {
    let live = Arc::new(Live {
        admin,
        depths: Depths::default(),
        streams: Arc::default(),
        shutdown,
    });
    let open = Router::new()
        .route("/", get(page::<B>))
        .route("/assets/{file}", get(asset))
        .route("/api/session", get(session))
        .route("/metrics", get(scrape::<B>))
        .with_state(Arc::clone(&live));
    let private = Router::new()
        .route("/api/login", post(login::<B>))
        .route("/api/overview", get(overview_now::<B>))
        .route("/api/events", get(events::<B>))
        .with_state(live);
    Routes { open, private }
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
            &self.admin.activity,
            &self.admin.fleet,
            &self.admin.batches,
            &reading,
        )
    }
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    login: Option<String>,
}

/// The page; with `?login=`, a login: a session cookie if the login token is pending,
/// then a redirect to `/`.
async fn page<B: AdminBackend>(
    State(live): Shared<B>,
    Query(query): Query<LoginQuery>,
) -> Response {
    let Some(login) = query.login else {
        let headers = [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CONTENT_SECURITY_POLICY, PAGE_POLICY),
            (REFERRER_POLICY, "no-referrer"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (CACHE_CONTROL, "no-store"),
        ];
        return (headers, INDEX).into_response();
    };
    let to_page = [(LOCATION, "/"), (REFERRER_POLICY, "no-referrer")];
    let Some(cookie) = live.admin.access.redeem(&login) else {
        warn!(
            "a dashboard login link was refused: used already, expired or wrong; `jobhost dashboard` prints a fresh one"
        );
        return (StatusCode::SEE_OTHER, to_page).into_response();
    };
    info!(
        "dashboard: a browser signed in, for {} h",
        SESSION_LIFETIME.as_secs() / 3600
    );
    (StatusCode::SEE_OTHER, [(SET_COOKIE, cookie)], to_page).into_response()
}

/// `POST /api/login`: a login token for `jobhost dashboard`'s link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginView {
    /// The login token: `GET /?login=LOGIN` opens a session with it, once.
    pub login: String,
    /// How long it works, in milliseconds.
    pub expires_in_ms: u64,
}

/// Only the token holder may mint logins: a session that could would outlive its expiry.
async fn login<B: AdminBackend>(
    State(live): Shared<B>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<LoginView>, ApiError> {
    if caller != Caller::Token {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "a login link is minted only for the holder of the admin token: run `jobhost dashboard`"
                .to_owned(),
        ));
    }
    Ok(Json(LoginView {
        login: live.admin.access.mint_login(),
        expires_in_ms: super::api::millis(LOGIN_LIFETIME),
    }))
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
    /// Whether this browser holds a session: it sees the host's state, replays and purges.
    pub can_change: bool,
}

async fn session(caller: Option<Extension<Caller>>) -> Json<SessionView> {
    Json(SessionView {
        can_change: matches!(caller, Some(Extension(Caller::Session(_)))),
    })
}

async fn overview_now<B: AdminBackend>(State(live): Shared<B>) -> Json<Overview> {
    Json(live.overview().await)
}

async fn events<B: AdminBackend>(
    State(live): Shared<B>,
    Extension(caller): Extension<Caller>,
) -> Result<Sse<impl Stream<Item = Result<Event, axum::Error>>>, ApiError> {
    let slot = StreamSlot::take(&live.streams, caller).ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_STREAMS_PER_CALLER} dashboard pages of this session follow the host already; close one"
            ),
        )
    })?;
    let ticks = tokio::time::interval(STREAM_EVERY);
    Ok(Sse::new(futures_util::stream::unfold(
        (live, ticks, slot),
        next_event,
    )))
}

/// One of a caller's [`MAX_STREAMS_PER_CALLER`] streams, given back when dropped.
struct StreamSlot {
    streams: Arc<Mutex<HashMap<Caller, usize>>>,
    caller: Caller,
}

impl StreamSlot {
    fn take(streams: &Arc<Mutex<HashMap<Caller, usize>>>, caller: Caller) -> Option<Self> {
        let mut counts = streams.lock().expect("the stream counts poisoned");
        let count = counts.entry(caller).or_default();
        if *count >= MAX_STREAMS_PER_CALLER {
            return None;
        }
        *count += 1;
        Some(Self {
            streams: Arc::clone(streams),
            caller,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.streams.lock().expect("the stream counts poisoned");
        if let Some(count) = counts.get_mut(&self.caller) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.caller);
            }
        }
    }
}

/// The next tick's overview as an event; none once the host shuts down or the stream's
/// session has expired.
async fn next_event<B: AdminBackend>(
    (live, mut ticks, slot): (Arc<Live<B>>, tokio::time::Interval, StreamSlot),
) -> Option<(
    Result<Event, axum::Error>,
    (Arc<Live<B>>, tokio::time::Interval, StreamSlot),
)> {
    tokio::select! {
        () = live.shutdown.cancelled() => return None,
        _ = ticks.tick() => {}
    }
    if !live.admin.access.is_current(slot.caller) {
        return None;
    }
    let event = Event::default()
        .event("overview")
        .json_data(live.overview().await);
    Some((event, (live, ticks, slot)))
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
