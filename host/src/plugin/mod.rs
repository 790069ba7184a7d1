//! The plugin layer: everything that knows wasmtime.
//!
//! No wasmtime type appears in this module's public API; the worker sees an [`Engine`]
//! that loads [`Plugin`]s and a [`Plugin`] that turns an [`Invocation`] into an
//! [`Outcome`]; those and the [`Manifest`] are the neutral vocabulary of [`crate::job`].
//!
//! # Contract
//! - A plugin is a component of the `plugin` world of `wit/jobhost.wit`, version
//!   [`WIT_VERSION`]. Anything else is refused at load with a [`LoadError`] naming the
//!   file and the reason.
//! - Compile once, instantiate per job: each [`Plugin::invoke`] runs in a fresh instance
//!   with the engine's memory cap and the invocation's timeout, and never fails: traps,
//!   panics, timeouts and the memory cap are [`Outcome::Crashed`].
//! - The sandbox grants nothing beyond the contract: no files, no environment, no sockets.
//!   What the operator grants a plugin in the grants file ([`crate::grants`]) comes through
//!   `wasi:http` (outbound requests to granted origins, within its limits) and
//!   `wasi:config/store` (its config values and secrets), read per job when it starts.
//!   Guest logs and stdout/stderr lines become `tracing` events (target `jobhost::guest`)
//!   tagged with plugin, job type, job id and attempt.
//! - Follow-up jobs a handler enqueues are returned in [`Outcome::Completed`]; the worker
//!   publishes them only when the job succeeds.
//!
//! # Table of contents
//! - [`engine`](Engine): the wasmtime engine, its pool, permits and epoch ticker.
//! - `load`: compile (or read the artifact cache), check the world, link, read the
//!   [`Manifest`]; `cache` holds the artifact cache.
//! - `manifest`: the guest's manifest turned into a [`Manifest`], validated.
//! - [`invoke`](Plugin::invoke): one job in a fresh store, and its [`Outcome`].
//! - `store`, `host_api`, `guest_log`: the per-job store data and limits, the imports a
//!   guest calls, and where its output goes.
//! - [`budget`](HostCallBudget): what a job may hand the host, counted before it is copied.
//! - `tape`: an attempt's recording, or the recording a [`replay`](Plugin::replay) plays
//!   back (docs/replay.md).
//! - `outbound`: `wasi:http` under the grants: the check, the checked connection, the
//!   limits, and what a job may hold through it; `config_store`: `wasi:config/store`.
//!
//! [`Invocation`]: crate::job::Invocation
//! [`Outcome`]: crate::job::Outcome
//! [`Outcome::Crashed`]: crate::job::Outcome::Crashed
//! [`Outcome::Completed`]: crate::job::Outcome::Completed
//! [`Manifest`]: crate::job::Manifest

mod bindings;
mod budget;
mod cache;
mod config_store;
mod engine;
mod error;
mod guest_log;
mod host_api;
mod invoke;
mod load;
mod manifest;
mod outbound;
mod store;
mod tape;
mod watchdog;

pub use budget::{BudgetExceeded, HostCallBudget, HttpPart};
pub use engine::{DEFAULT_MAX_PLUGIN_SIZE, EPOCH_TICK, Engine, EngineConfig, MEMORY_RESERVATION};
pub use error::{EngineError, LoadError};
pub use load::{Plugin, WIT_VERSION};
pub use tape::Replayed;
