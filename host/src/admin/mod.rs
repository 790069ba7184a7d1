//! The local admin API: what `jobhost plugins|policy|enqueue|batches|dead|queue|job|schedules|dashboard` ask a
//! running host.
//!
//! The host serves it on loopback (`127.0.0.1:7878` by default). It answers only to
//! requests addressed to it by a loopback name or its own address, refuses web pages of
//! other sites, and shows payloads, failure reasons and grants, and takes mutating
//! requests, only from the holder of the token the host wrote at start into its token
//! file, or from a dashboard session that `jobhost dashboard`'s link opened
//! ([`AdminAccess`]). The token is never logged; the log names the token file.
//!
//! | route | answer | who |
//! |---|---|---|
//! | `GET /` | the web dashboard ([`dashboard`]); `/?login=LOGIN` signs a browser in | open: the page shows nothing until signed in |
//! | `GET /assets/{file}` | the page's script and style | open |
//! | `GET /api/session` | [`SessionView`](dashboard::SessionView): whether the browser is signed in | open |
//! | `GET /healthz` | [`Health`](api::Health) | open: up or not, the backend, how many plugins |
//! | `GET /metrics` | Prometheus text ([`Metrics`](crate::metrics::Metrics)) | open: counts by queue and job type, for scrapers |
//! | `POST /api/login` | [`LoginView`](dashboard::LoginView), what `jobhost dashboard` prints as a link | token |
//! | `GET /api/overview` | [`Overview`](dashboard::Overview): queues, plugins, job types, reloads, failures, the newest batches | token or session: failure reasons |
//! | `GET /api/events` | the same as Server-Sent Events, every [`STREAM_EVERY`](dashboard::STREAM_EVERY) | token or session |
//! | `GET /plugins` | [`PluginView`](api::PluginView)s with effective policies and grants (never a secret's value) | token or session: grants, config keys, secret sources |
//! | `GET /policy/{job_type}` | [`PolicyReport`](api::PolicyReport) with its wait schedule | token or session: part of the plugins' view |
//! | `POST /jobs` | [`EnqueueRequest`](api::EnqueueRequest) -> [`Enqueued`](api::Enqueued) | token, or session from the page |
//! | `GET /dead/{queue}?limit=N` | [`DeadLetterList`](api::DeadLetterList): the first letters as excerpts, at most [`LISTING_MAX_BYTES`](crate::broker::LISTING_MAX_BYTES) | token or session: payloads and reasons |
//! | `POST /recordings` | the kept [`Recording`](crate::job::Recording)s of the [`RecordingsRequest`](api::RecordingsRequest)'s jobs (at most 16) |  token or session |
//! | `GET /recordings/{job_id}` | the kept [`Recording`](crate::job::Recording)s of the job's attempts, oldest first (docs/replay.md) | token or session: payloads and answers |
//! | `POST /dead/{queue}/replay` | [`ReplayReport`](api::ReplayReport) | token, or session from the page |
//! | `DELETE /dead/{queue}` | [`PurgeReport`](api::PurgeReport) | token, or session from the page |
//! | `POST /dead/{queue}/{job_id}/replay` | [`ReplayReport`](api::ReplayReport) of that one job | token, or session from the page |
//! | `DELETE /dead/{queue}/{job_id}` | [`PurgeReport`](api::PurgeReport) of that one job | token, or session from the page |
//! | `POST /queues/{queue}/pause` | [`OrderRequest`](api::OrderRequest) -> [`Order`](api::Order): the fleet stops consuming the queue | token, or session from the page |
//! | `POST /queues/{queue}/resume` | [`OrderRequest`](api::OrderRequest) -> [`Order`](api::Order): the fleet consumes it again | token, or session from the page |
//! | `POST /jobs/{job_id}/cancel` | [`OrderRequest`](api::OrderRequest) -> [`Order`](api::Order): the job is cancelled wherever it is | token, or session from the page |
//! | `POST /batches` | [`BatchRequest`](crate::batches::BatchRequest) -> [`BatchOpened`](crate::batches::BatchOpened): the jobs enqueued as one batch with callbacks (see [`crate::batches`]) | token, or session from the page |
//! | `GET /batches` | the newest [`BatchView`](crate::batches::BatchView)s, at most [`BATCHES_LISTED`] | token or session |
//! | `GET /batches/{batch_id}` | one [`BatchView`](crate::batches::BatchView): done, dead and pending of the total, each callback | token or session |
//! | `GET /schedules` | [`ScheduleView`](api::ScheduleView)s: each schedule of the grants file, its next tick and last firings (see [`crate::schedule`]) | token or session: payload-free, but the fleet's timing |
//!
//! The server takes at most [`MAX_CONNECTIONS`] connections at once and closes one that
//! has not sent a request head within [`HEADER_READ_TIMEOUT`].
//!
//! The `/dead` and `/queues` routes serve only the queues of loaded plugins; a pause,
//! resume or cancel reaches the whole fleet on the broker (see [`Control`](crate::broker::Control)).
//!
//! Errors are `{"error": "..."}` with 404 for an unknown job type or queue, 503 when the
//! broker is unreachable, 502 when it refused, 400 for a `limit` above
//! [`MAX_DEAD_LIMIT`], and 421, 403 or 401 from [`AdminAccess`].
//!
//! # Table of contents
//! - [`api`]: the JSON bodies, and the wait schedule of a policy.
//! - [`dashboard`]: the web page, its overview and its live stream.
//! - [`AdminBackend`]: what the API uses of either backend, dead letters included.
//! - [`enqueue`]: a job by type name and JSON, as the CLI and the demo send it.
//! - [`router`], [`serve`]: the server, behind [`AdminAccess`]; [`AdminClient`]: the client.
//! - [`SESSION_LIFETIME`] and the other bounds of the dashboard's logins and sessions.

mod access;
pub mod api;
mod client;
pub mod dashboard;
mod dead;
mod error;
mod grants_view;
mod jobs;
mod schedules_view;
mod server;
mod session;
mod state;

pub use access::AdminAccess;
pub use client::{AdminClient, ClientError};
pub use dead::AdminBackend;
pub use jobs::enqueue;
pub use server::{
    BATCHES_LISTED, DEFAULT_DEAD_LIMIT, HEADER_READ_TIMEOUT, MAX_CONNECTIONS, MAX_DEAD_LIMIT,
    MAX_RECORDINGS_ASKED, router, serve,
};
pub use session::{LOGIN_LIFETIME, MAX_PENDING_LOGINS, MAX_SESSIONS, SESSION_LIFETIME};
pub use state::AdminState;

/// Where the admin API listens unless told otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";
