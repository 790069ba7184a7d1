//! The host's log lines, and with the `otlp` feature and `--otlp-endpoint`, the export of
//! its job spans.

use std::io::IsTerminal;

use tokio::runtime::Handle;
use tracing::Subscriber;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

use super::log_format::{JobHeads, PeopleFormat};
use super::{CLIENT_LOG, Cli, Command, DEV_LOG, HOST_LOG, LogFormat};

/// What must be flushed at exit: the OTLP exporter, when one runs.
#[derive(Debug, Default)]
pub(crate) struct Telemetry {
    #[cfg(feature = "otlp")]
    otlp: Option<jobhost::trace::otlp::OtlpExport>,
}

impl Telemetry {
    /// Send what is still buffered; call it off the runtime's threads, after `block_on`.
    pub(crate) fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(otlp) = self.otlp {
            otlp.shutdown();
        }
    }
}

/// Log lines on stderr as `--log-format` says, filtered by `--log`/`RUST_LOG` or the
/// command's default; with `--otlp-endpoint`, job spans exported too, their requests on
/// `runtime`.
#[cfg_attr(not(feature = "otlp"), allow(unused_variables))]
pub(crate) fn init_logging(cli: &Cli, runtime: &Handle) -> anyhow::Result<Telemetry> {
    let default = match cli.command {
        Command::Dev(_) => DEV_LOG,
        Command::Run(_) | Command::Build(_) | Command::New(_) => HOST_LOG,
        _ => CLIENT_LOG,
    };
    let filter = match cli.log.as_deref().map(EnvFilter::try_new) {
        Some(Ok(filter)) => filter,
        Some(Err(err)) => {
            eprintln!("warning: ignoring the log filter (--log or RUST_LOG): {err}");
            EnvFilter::new(default)
        }
        None => EnvFilter::new(default),
    };
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    #[cfg(feature = "otlp")]
    if let Some(endpoint) = otlp_endpoint(cli) {
        return with_otlp(endpoint, runtime, lines(cli.log_format, ansi), filter);
    }
    // The filter is the subscriber's own, so what it turns off (the worker's debug `job`
    // span, at the default level) costs nothing at all.
    tracing_subscriber::registry()
        .with(filter)
        .with(JobHeads)
        .with(lines(cli.log_format, ansi))
        .init();
    Ok(Telemetry::default())
}

/// The layer that writes the lines, in `format`.
fn lines<S>(format: LogFormat, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => layer.event_format(PeopleFormat { ansi }).boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    }
}

#[cfg(feature = "otlp")]
fn otlp_endpoint(cli: &Cli) -> Option<&str> {
    match &cli.command {
        Command::Run(args) | Command::Dev(args) => args.otlp_endpoint.as_deref(),
        _ => None,
    }
}

/// The log lines keep their filter as a filter of their own layer, so the exporter's
/// layer sees the job spans whatever level the lines are at.
#[cfg(feature = "otlp")]
fn with_otlp(
    endpoint: &str,
    runtime: &Handle,
    lines: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>,
    filter: EnvFilter,
) -> anyhow::Result<Telemetry> {
    let otlp = jobhost::trace::otlp::OtlpExport::start(endpoint, runtime.clone())?;
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(JobHeads)
        .with(otlp.layer())
        .init();
    tracing::info!(%endpoint, "exporting job spans over OTLP");
    Ok(Telemetry { otlp: Some(otlp) })
}
