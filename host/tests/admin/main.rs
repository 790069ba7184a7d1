//! What operators watch a host through: the admin API's access control, the dashboard's
//! API and the dashboard in headless Chromium, `/metrics`, and (feature `otlp`) each job's
//! span exported over OTLP to a collector the test runs.
//!
//! `dashboard_browser` needs Debian's Chromium and chromedriver (`.ci/test` installs them;
//! `JOBHOST_SKIP_BROWSER_TESTS=1` skips it without them) and the broker at `AMQP_URL`; the
//! rest run `jobhost run` on the memory backend.
//!
//! ```text
//! cargo test -p jobhost --test admin
//! cargo test -p jobhost --features otlp --test admin otlp_export::
//! ```

#[path = "../support/mod.rs"]
mod support;

mod admin_access;
mod dashboard_api;
mod dashboard_browser;
mod metrics;
mod otlp_export;
