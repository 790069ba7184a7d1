//! jobhost: a RabbitMQ job host whose job handlers are WebAssembly components.
//!
//! # Table of contents
//! - [`app`]: a running host: plugin directory, hot reload, worker and admin API together.
//! - [`admin`]: the local admin HTTP API (server and client) that the CLI talks to.
//! - [`envelope`]: the JSON envelope every job travels in, shared with the `queuey` crate.
//! - [`broker`]: the [`broker::Backend`] seam, RabbitMQ and the embedded memory backend.
//! - [`job`]: the job vocabulary: manifests, invocations and their outcomes.
//! - [`metrics`]: the host's Prometheus metrics, served on the admin API's `/metrics`.
//! - [`plugin`]: the wasmtime engine that loads plugin components and runs their jobs.
//! - [`policy`]: which retry policy and timeout apply to a delivery.
//! - [`producer`]: enqueueing typed jobs from native Rust applications.
//! - [`reload`]: loading the plugin directory and following its changes.
//! - [`worker`]: consuming, running and settling jobs; the plugin registry.
//! - [`trace`]: W3C trace context across jobs: headers in and out, each attempt's span.
//! - [`text`]: bounding untrusted text (job types, reasons, guest words) before it leaves the host.
//! - [`testing`]: a harness running plugins on the memory backend under a paused clock.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `tls` | off | `amqps://` to the broker through rustls (`--amqp-ca-file`, client certificates) |
//! | `otlp` | off | OTLP/HTTP export of each job's span (`run --otlp-endpoint URL`, module `trace::otlp`) |

#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod broker;
pub mod envelope;
pub mod job;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod producer;
pub mod reload;
pub mod testing;
pub mod text;
pub mod trace;
pub mod worker;
