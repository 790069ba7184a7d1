//! The `jobhost` binary as a user runs it, on the memory backend: `jobhost run` driven
//! through its client commands (enqueue, batches, dead letters, pausing and cancelling, exit codes,
//! Ctrl-C), the grants file, `jobhost dev`, `jobhost new` + `jobhost build` (Rust,
//! JavaScript and Python plugins), `jobhost replay` and a probation's rollback, and how
//! errors print their causes.
//!
//! Needs no broker; `cli_scaffold` compiles a plugin crate for `wasm32-wasip2`, `cli_js`
//! needs Node.js and npm (`JOBHOST_SKIP_JS_TESTS=1` skips it without them), and
//! `cli_python` Python 3.11+ with `venv` (`JOBHOST_SKIP_PYTHON_TESTS=1` skips it).
//!
//! ```text
//! cargo test -p jobhost --test cli
//! ```

#[path = "../support/mod.rs"]
mod support;

mod cli_batches;
mod cli_dev;
mod cli_grants;
mod cli_js;
mod cli_python;
mod cli_replay;
mod cli_run;
mod cli_scaffold;
mod error_chains;
