//! The local admin API: what `jobhost plugins|policy|enqueue|dead` ask a running host.
//!
//! The host serves it on loopback (`127.0.0.1:7878` by default). It answers only to
//! requests addressed to it by a loopback name or its own address, refuses web pages of
//! other sites, and takes mutating requests only with the bearer token the host generated
//! at start, or from the dashboard opened through its login link ([`AdminAccess`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the web dashboard ([`dashboard`]); `/?token=LOGIN` logs a browser in |
//! | `GET /api/overview` | [`Overview`](dashboard::Overview): queues, plugins, job types, reloads, failures |
//! | `GET /api/events` | the same as Server-Sent Events, every [`STREAM_EVERY`](dashboard::STREAM_EVERY) |
//! | `GET /api/session` | [`SessionView`](dashboard::SessionView): whether the browser may replay and purge |
//! | `GET /healthz` | [`Health`](api::Health) |
//! | `GET /metrics` | Prometheus text ([`Metrics`](crate::metrics::Metrics)) |
//! | `GET /plugins` | [`PluginView`](api::PluginView)s with effective policies and grants (never a secret's value) |
//! | `GET /policy/{job_type}` | [`PolicyReport`](api::PolicyReport) with its wait schedule |
//! | `POST /jobs` | [`EnqueueRequest`](api::EnqueueRequest) -> [`Enqueued`](api::Enqueued) |
//! | `GET /dead/{queue}?limit=N` | [`DeadLetterView`](api::DeadLetterView)s, oldest first |
//! | `POST /dead/{queue}/replay` | [`ReplayReport`](api::ReplayReport) |
//! | `DELETE /dead/{queue}` | [`PurgeReport`](api::PurgeReport) |
//! | `POST /dead/{queue}/{job_id}/replay` | [`ReplayReport`](api::ReplayReport) of that one job |
//! | `DELETE /dead/{queue}/{job_id}` | [`PurgeReport`](api::PurgeReport) of that one job |
//!
//! Errors are `{"error": "..."}` with 404 for an unknown job type or queue, 503 when the
//! broker is unreachable, 502 when it refused, 400 for a `limit` above
//! [`MAX_DEAD_LIMIT`], and 421, 403 or 401 from [`AdminAccess`].
//!
//! # Table of contents
//! - [`api`]: the JSON bodies, and the wait schedule of a policy.
//! - [`dashboard`]: the web page, its overview and its live stream.
//! - [`AdminBackend`]: dead-letter operations on either backend.
//! - [`enqueue`]: a job by type name and JSON, as the CLI and the demo send it.
//! - [`router`], [`serve`]: the server, behind [`AdminAccess`]; [`AdminClient`]: the client.

mod access;
pub mod api;
mod client;
pub mod dashboard;
mod dead;
mod grants_view;
mod jobs;
mod server;

pub use access::AdminAccess;
pub use client::{AdminClient, ClientError};
pub use dead::AdminBackend;
pub use jobs::enqueue;
pub use server::{AdminState, DEFAULT_DEAD_LIMIT, MAX_DEAD_LIMIT, router, serve};

/// Where the admin API listens unless told otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";
