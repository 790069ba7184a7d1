//! The admin API server: the running host's registry and broker, as JSON over HTTP, on a
//! bounded number of connections that each must send their request heads in time.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router, middleware};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::access;
use super::api::{
    Command, DeadLetterList, EnqueueRequest, Enqueued, Health, Order, OrderRequest, PluginView,
    PolicyReport, PurgeReport, RecordingsRequest, ReplayReport, ScheduleView,
};
use super::dashboard;
use super::dead::AdminBackend;
use super::error::ApiError;
use super::jobs::enqueue;
use super::state::AdminState;
use crate::batches::{self, BatchOpened, BatchRequest, BatchView, OpenError};
use crate::broker::{BrokerError, dead_letter_queue_name};
use crate::job::Recording;
use crate::producer::EnqueueOptions;
use crate::schedule::{Clock, InForce, Source, in_force};
use crate::telemetry::Event;
use crate::text::{NAME_MAX, bounded};
use crate::trace::TraceContext;

/// How many dead letters `GET /dead/{queue}` lists unless `?limit=` says otherwise.
pub const DEFAULT_DEAD_LIMIT: usize = 100;
/// The most jobs `POST /recordings` looks up at once: each recording may be a MiB.
pub const MAX_RECORDINGS_ASKED: usize = 16;

/// The most `GET /dead/{queue}?limit=` accepts, because a listing reads each letter up to
/// its limit off the broker, one at a time, whatever its byte cap leaves out.
pub const MAX_DEAD_LIMIT: usize = 1000;

/// The routes of the [module's table](super), each behind [`AdminAccess`]'s checks: the
/// open ones (health, metrics, the page and its files, whether a browser is signed in, the
/// login exchange) for anyone the checks let through, the rest only for the token holder
/// or a dashboard session (`401` otherwise). The dashboard's streams of this router never
/// end; [`serve`] ends them at shutdown.
pub fn router<B: AdminBackend>(state: AdminState<B>) -> Router {
    routes(state, CancellationToken::new())
}

/// [`router`], whose dashboard streams end at `shutdown`.
fn routes<B: AdminBackend>(state: AdminState<B>, shutdown: CancellationToken) -> Router {
    let access = Arc::new(state.access.clone());
    let state = Arc::new(state);
    let dashboard = dashboard::routes(Arc::clone(&state), shutdown);
    let open = Router::new()
        .route("/healthz", get(health::<B>))
        .with_state(Arc::clone(&state))
        .merge(dashboard.open);
    Router::new()
        .route("/plugins", get(plugins::<B>))
        .route("/policy/{job_type}", get(policy::<B>))
        .route("/jobs", post(enqueue_job::<B>))
        .route("/dead/{queue}", get(list_dead::<B>).delete(purge_dead::<B>))
        .route("/dead/{queue}/replay", post(replay_dead::<B>))
        .route("/dead/{queue}/{job_id}", delete(purge_one::<B>))
        .route("/dead/{queue}/{job_id}/replay", post(replay_one::<B>))
        .route("/queues/{queue}/{action}", post(pause_or_resume::<B>))
        .route("/jobs/{job_id}/cancel", post(cancel_job::<B>))
        .route("/schedules", get(schedules::<B>))
        .route("/batches", get(list_batches::<B>).post(open_batch::<B>))
        .route("/batches/{batch_id}", get(one_batch::<B>))
        .route("/recordings/{job_id}", get(recordings::<B>))
        .route("/recordings", post(find_recordings::<B>))
        .with_state(state)
        .merge(dashboard.private)
        .route_layer(middleware::from_fn(access::require_caller))
        .merge(open)
        .layer(middleware::from_fn_with_state(access, access::guard))
}

/// How long a client may take to send a request's head, on a new connection and between
/// the requests of a kept-alive one; the connection is closed then, so a client that
/// never finishes its headers holds no connection slot for long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections served at once. Beyond it, new connections wait in the listen
/// backlog until one closes, so a flood of connections costs the host no memory.
pub const MAX_CONNECTIONS: usize = 64;
/// How long accepting pauses after an error such as too many open files, which retrying
/// at once would only repeat.
const ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// Serve `state` on `listener` until `shutdown` (HTTP/1.1, at most [`MAX_CONNECTIONS`] at
/// once, each cut after [`HEADER_READ_TIMEOUT`] without a request head); returns once
/// every connection has ended.
pub async fn serve<B: AdminBackend>(
    listener: TcpListener,
    state: AdminState<B>,
    shutdown: CancellationToken,
) {
    let service = TowerToHyperService::new(routes(state, shutdown.clone()));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = GracefulShutdown::new();
    loop {
        let (stream, slot) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = accept(&listener, &slots) => accepted,
        };
        let connection =
            connections.watch(http.serve_connection(TokioIo::new(stream), service.clone()));
        tokio::spawn(async move {
            // A client that went away or sent garbage: nothing for the host to act on.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    connections.shutdown().await;
}

/// The next connection, once one of the `slots` is free.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> (TcpStream, OwnedSemaphorePermit) {
    let slot = Arc::clone(slots)
        .acquire_owned()
        .await
        .expect("the connection slots are never closed");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return (stream, slot),
            // The client gave up before it was accepted.
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Err(err) => {
                tracing::warn!(error = %err, "the admin API cannot accept a connection; trying again in {ACCEPT_PAUSE:?}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

type Shared<B> = State<Arc<AdminState<B>>>;

async fn health<B: AdminBackend>(State(state): Shared<B>) -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        backend: B::KIND.to_owned(),
        plugins: state.plugins.current().units().count(),
    })
}

async fn plugins<B: AdminBackend>(State(state): Shared<B>) -> Json<Vec<PluginView>> {
    Json(PluginView::all(
        &state.plugins.current(),
        &state.grants.current(),
    ))
}

/// Each schedule in force, with the firings the broker keeps of it.
async fn schedules<B: AdminBackend>(
    State(state): Shared<B>,
) -> Result<Json<Vec<ScheduleView>>, ApiError> {
    let grants = state.grants.current();
    let now_ms = Clock::System.now_ms();
    let mut views = Vec::new();
    for InForce {
        name,
        schedule,
        source,
    } in in_force(&grants, &state.plugins.current())
    {
        let firings = state.backend.firings(&name).await?;
        let from = match source {
            Source::File => format!("[schedules.{name:?}] in {}", grants.shown_file()),
            Source::Plugin(plugin) => format!("plugin {plugin}"),
        };
        views.push(ScheduleView::of(&name, from, &schedule, now_ms, firings));
    }
    Ok(Json(views))
}

/// How many batches `GET /batches` lists: the newest opened.
pub const BATCHES_LISTED: usize = 100;

async fn list_batches<B: AdminBackend>(State(state): Shared<B>) -> Json<Vec<BatchView>> {
    Json(state.batches.views(BATCHES_LISTED))
}

async fn one_batch<B: AdminBackend>(
    State(state): Shared<B>,
    Path(batch_id): Path<Uuid>,
) -> Result<Json<BatchView>, ApiError> {
    state.batches.view(batch_id).map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no batch {batch_id} in the batch log this host follows (it may not have read its opening yet)"),
        )
    })
}

async fn open_batch<B: AdminBackend>(
    State(state): Shared<B>,
    Json(request): Json<BatchRequest>,
) -> Result<Json<BatchOpened>, ApiError> {
    let opened = batches::open(&state.backend, &state.plugins.current(), request)
        .await
        .map_err(|error| {
            let status = match &error {
                OpenError::NoHandler(_) => StatusCode::NOT_FOUND,
                OpenError::Invalid(_) => StatusCode::BAD_REQUEST,
                OpenError::NotOpened(_) | OpenError::Partial { .. } => StatusCode::BAD_GATEWAY,
            };
            ApiError::new(status, error.to_string())
        })?;
    tracing::info!(batch = %opened.batch_id, jobs = opened.job_ids.len(), "batch opened");
    Ok(Json(opened))
}

async fn policy<B: AdminBackend>(
    State(state): Shared<B>,
    Path(job_type): Path<String>,
) -> Result<Json<PolicyReport>, ApiError> {
    let registry = state.plugins.current();
    let route = registry
        .route(&job_type)
        .ok_or_else(|| no_handler(&job_type))?;
    Ok(Json(PolicyReport::of(route, &state.grants.current())))
}

async fn enqueue_job<B: AdminBackend>(
    State(state): Shared<B>,
    Json(request): Json<EnqueueRequest>,
) -> Result<Json<Enqueued>, ApiError> {
    let registry = state.plugins.current();
    let route = registry
        .route(&request.job_type)
        .ok_or_else(|| no_handler(&request.job_type))?;
    let mut options = EnqueueOptions::new();
    if let Some(ms) = request.delay_ms {
        options = options.delay(Duration::from_millis(ms));
    }
    if let Some(ms) = request.expires_in_ms {
        options = options.expires_in(Duration::from_millis(ms));
    }
    if let Some(unique) = &request.unique {
        options = options.unique(unique.key.as_str(), Duration::from_millis(unique.for_ms));
    }
    if let Some(declared) = &route.job_limits.unique
        && let Ok(payload) = serde_json::value::to_raw_value(&request.payload)
    {
        options = options.unique_as_declared(Some(declared), &payload);
    }
    if let Some(value) = request.traceparent.as_deref() {
        let trace =
            TraceContext::from_headers(value.as_bytes(), None).ok_or_else(bad_traceparent)?;
        options = options.trace(trace);
    }
    let enqueued = enqueue(
        &state.backend,
        &route.queue,
        &request.job_type,
        &request.payload,
        options,
        state.granularity,
    )
    .await
    .inspect_err(|err| {
        if matches!(err, BrokerError::Duplicate { .. }) {
            state.telemetry.emit(&Event::DuplicateRefused {
                job_type: &request.job_type,
            });
        }
    })?;
    tracing::info!(job_type = %request.job_type, job_id = %enqueued.job_id, queue = %enqueued.queue, "job enqueued through the admin API");
    Ok(Json(enqueued))
}

#[derive(Debug, Deserialize)]
struct Limit {
    limit: Option<usize>,
}

async fn list_dead<B: AdminBackend>(
    State(state): Shared<B>,
    Path(queue): Path<String>,
    Query(limit): Query<Limit>,
) -> Result<Json<DeadLetterList>, ApiError> {
    let limit = limit.limit.unwrap_or(DEFAULT_DEAD_LIMIT);
    if limit > MAX_DEAD_LIMIT {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`limit` is {limit}; it must be at most {MAX_DEAD_LIMIT}"),
        ));
    }
    loaded(&state, &queue)?;
    Ok(Json(state.backend.list_dead(&queue, limit).await?))
}

async fn replay_dead<B: AdminBackend>(
    State(state): Shared<B>,
    Path(queue): Path<String>,
) -> Result<Json<ReplayReport>, ApiError> {
    loaded(&state, &queue)?;
    let report = state.backend.replay_dead(&queue).await?;
    tracing::info!(%queue, replayed = report.replayed, skipped = report.skipped, "dead letters replayed");
    Ok(Json(report))
}

async fn purge_dead<B: AdminBackend>(
    State(state): Shared<B>,
    Path(queue): Path<String>,
) -> Result<Json<PurgeReport>, ApiError> {
    loaded(&state, &queue)?;
    let purged = state.backend.purge_dead(&queue).await?;
    tracing::info!(%queue, purged, "dead letters purged");
    Ok(Json(PurgeReport { purged }))
}

async fn replay_one<B: AdminBackend>(
    State(state): Shared<B>,
    Path((queue, job_id)): Path<(String, Uuid)>,
) -> Result<Json<ReplayReport>, ApiError> {
    loaded(&state, &queue)?;
    if !state.backend.take_dead(&queue, job_id, true).await? {
        return Err(no_dead_letter(&queue, job_id));
    }
    tracing::info!(%queue, %job_id, "dead letter replayed");
    Ok(Json(ReplayReport {
        replayed: 1,
        skipped: 0,
    }))
}

async fn purge_one<B: AdminBackend>(
    State(state): Shared<B>,
    Path((queue, job_id)): Path<(String, Uuid)>,
) -> Result<Json<PurgeReport>, ApiError> {
    loaded(&state, &queue)?;
    if !state.backend.take_dead(&queue, job_id, false).await? {
        return Err(no_dead_letter(&queue, job_id));
    }
    tracing::info!(%queue, %job_id, "dead letter purged");
    Ok(Json(PurgeReport { purged: 1 }))
}

/// What `POST /queues/{queue}/{action}` does to the queue.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum QueueAction {
    Pause,
    Resume,
}

async fn pause_or_resume<B: AdminBackend>(
    State(state): Shared<B>,
    Path((queue, action)): Path<(String, QueueAction)>,
    Json(request): Json<OrderRequest>,
) -> Result<Json<Order>, ApiError> {
    loaded(&state, &queue)?;
    let command = match action {
        QueueAction::Pause => Command::Pause { queue },
        QueueAction::Resume => Command::Resume { queue },
    };
    order(&state, command, request).await
}

/// Any job id, because the job may be queued, held or running on another host, none of
/// which this host can see.
/// The kept recordings of a job's attempts, oldest first; none is an empty list.
async fn recordings<B: AdminBackend>(
    State(state): Shared<B>,
    Path(job_id): Path<Uuid>,
) -> Result<Json<Vec<Recording>>, ApiError> {
    Ok(Json(state.backend.recordings_of(&[job_id]).await?))
}

/// The kept recordings of up to [`MAX_RECORDINGS_ASKED`] jobs at once, in one pass over
/// what is kept: what `jobhost replay --queue` asks for a page of dead letters.
async fn find_recordings<B: AdminBackend>(
    State(state): Shared<B>,
    Json(asked): Json<RecordingsRequest>,
) -> Result<Json<Vec<Recording>>, ApiError> {
    if asked.job_ids.len() > MAX_RECORDINGS_ASKED {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{} job ids asked; at most {MAX_RECORDINGS_ASKED} at once",
                asked.job_ids.len()
            ),
        ));
    }
    Ok(Json(state.backend.recordings_of(&asked.job_ids).await?))
}

async fn cancel_job<B: AdminBackend>(
    State(state): Shared<B>,
    Path(job_id): Path<Uuid>,
    Json(request): Json<OrderRequest>,
) -> Result<Json<Order>, ApiError> {
    order(&state, Command::Cancel { job_id }, request).await
}

/// Give the fleet `command`, from whoever `request` says, now.
async fn order<B: AdminBackend>(
    state: &AdminState<B>,
    command: Command,
    request: OrderRequest,
) -> Result<Json<Order>, ApiError> {
    let order = Order::now(command, request.by);
    state.backend.order(&order).await?;
    tracing::info!(order = ?order.command, by = %order.by, "operator order given to the fleet");
    Ok(Json(order))
}

/// The `/dead` and `/queues` routes serve only the queues a loaded plugin declares, so
/// the API never reaches, with the host's broker credentials, a queue of the vhost that
/// is not this host's.
fn loaded<B>(state: &AdminState<B>, queue: &str) -> Result<(), ApiError> {
    if state.plugins.current().queues().any(|q| q.name == queue) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "`{}` is not a queue of a loaded plugin, so this host serves neither its dead \
             letters nor its pause; `jobhost plugins` lists the queues",
            bounded(queue, NAME_MAX)
        ),
    ))
}

fn no_dead_letter(queue: &str, job_id: Uuid) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no dead letter of job `{job_id}` in `{}`; it may have been replayed or purged already",
            dead_letter_queue_name(&bounded(queue, NAME_MAX))
        ),
    )
}

/// The value is not echoed: it may be anything, of any length.
fn bad_traceparent() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "`traceparent` is not a W3C trace parent: `00-{32 hex}-{16 hex}-{2 hex}`, lowercase, \
         ids not all zero"
            .to_owned(),
    )
}

fn no_handler(job_type: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no loaded plugin serves job type `{job_type}`; `jobhost plugins` lists the job types"
        ),
    )
}
