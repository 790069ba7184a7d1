//! jobhost: a RabbitMQ job host whose job handlers are WebAssembly components.
//!
//! # Table of contents
//! - [`activity`]: what the host did lately (reloads, failures, per-queue counts), for the dashboard.
//! - [`app`]: a running host: plugin directory, hot reload, worker and admin API together.
//! - [`admin`]: the local admin HTTP API (server and client) that the CLI talks to.
//! - [`batches`]: jobs enqueued together, with callbacks fired once across the fleet.
//! - [`grants`]: what the operator grants each plugin in `jobhost.toml`: outbound origins,
//!   limits, config values and secrets.
//! - [`files`]: reading a file the host does not control: regular, capped, never blocking.
//! - [`envelope`]: the JSON envelope every job travels in, shared with the `queuey` crate.
//! - [`broker`]: the [`broker::Backend`] seam, RabbitMQ and the embedded memory backend.
//! - [`job`]: the job vocabulary: manifests, invocations and their outcomes.
//! - [`metrics`]: the host's Prometheus metrics, served on the admin API's `/metrics`.
//! - [`plugin`]: the wasmtime engine that loads plugin components and runs their jobs.
//! - [`policy`]: which retry policy and timeout apply to a delivery.
//! - [`producer`]: enqueueing typed jobs from native Rust applications.
//! - [`reload`]: loading the plugin directory and following its changes.
//! - [`telemetry`]: one event per thing that happens in the host, and the observers
//!   (metrics, the dashboard's activity) attached to it.
//! - [`schedule`]: periodic jobs: the operator's schedules, fired once per tick across the fleet.
//! - [`worker`]: consuming, running and settling jobs; the plugin registry.
//! - [`trace`]: W3C trace context across jobs: headers in and out, each attempt's span.
//! - [`text`]: bounding untrusted text (job types, reasons, guest words) before it leaves the host.
//! - [`testing`]: a harness running plugins on the memory backend under a paused clock
//!   (feature `testing`).
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `tls` | on | `amqps://` to the broker (`--amqp-ca-file`, client certificates) and `https://` outbound requests of plugins (the webpki roots and `[outbound] ca_certificates` of `jobhost.toml`), through rustls |
//! | `otlp` | off | OTLP/HTTP export of each job's span (`run --otlp-endpoint URL`, module `trace::otlp`) |
//! | `testing` | off | the [`testing`] harness, for the tests of this workspace and of embedders |

#![warn(missing_docs)]

pub mod activity;
pub mod admin;
pub mod app;
pub mod batches;
pub mod broker;
pub mod envelope;
pub mod files;
pub mod grants;
pub mod job;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod producer;
pub mod reload;
pub mod schedule;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod trace;
pub mod worker;
