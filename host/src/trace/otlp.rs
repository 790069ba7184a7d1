//! OTLP export of job spans (feature `otlp`): each delivery's `job` span, sent over
//! OTLP/HTTP (protobuf) to a collector, in the trace it belongs to.
//!
//! # Contract
//! - Only the worker's `job` spans are exported (see [`JOB_SPAN_TARGET`]); the layer's
//!   filter enables nothing else, so the host's other spans and events cost nothing more.
//! - The exported span has the ids the worker drew and passes on: the trace id and parent
//!   of the incoming `traceparent` (a remote parent), and the span id that follow-ups name
//!   as their parent. A message without a sampled `traceparent` flag is not exported,
//!   like OpenTelemetry's parent-based sampler; a new trace is sampled.
//! - Attributes: `jobhost.job_id`, `jobhost.job_type`, `jobhost.attempt`,
//!   `jobhost.plugin` (`name@version`); span kind `consumer`, named after the job type.
//! - Spans are batched and sent from the SDK's export thread; the HTTP requests run on the
//!   host's tokio runtime (plain `http://` only, 10 s per request), so no second HTTP stack
//!   or runtime is linked in. A collector that is down costs dropped spans, never a job.
//! - Without the feature none of this is compiled; with it but without an endpoint, no
//!   exporter exists and the job span stays a debug-level span that is off by default.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry::trace::{
    SpanContext, SpanId as OtelSpanId, SpanKind, Status, TraceFlags, TraceId as OtelTraceId,
    TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanProcessor};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The target of the worker's `job` span, the one span exported.
pub const JOB_SPAN_TARGET: &str = "jobhost::worker::deliver";

/// How long one export request may take, connect included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a collector's answer read; the answer is only checked for its status.
const ANSWER_MAX: usize = 64 * 1024;

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The endpoint is not an `http://` URL the exporter accepts.
    #[error("cannot export to OTLP endpoint `{endpoint}`: {cause}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        cause: String,
    },
}

/// A running OTLP exporter of job spans; [`shutdown`](Self::shutdown) sends what is left.
#[derive(Debug, Clone)]
pub struct OtlpExport {
    processor: Arc<BatchSpanProcessor>,
}

impl OtlpExport {
    /// Export to the collector at `endpoint`, its base URL (`http://host:4318`): spans
    /// go to `{endpoint}/v1/traces`, as `OTEL_EXPORTER_OTLP_ENDPOINT` means it. Requests
    /// run on `runtime`.
    pub fn start(endpoint: &str, runtime: Handle) -> Result<Self, OtlpError> {
        let failed = |cause: String| OtlpError::Endpoint {
            endpoint: endpoint.to_owned(),
            cause,
        };
        if !endpoint.starts_with("http://") {
            return Err(failed(
                "only plain `http://` is supported; run a collector or agent next to the host"
                    .to_owned(),
            ));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(RuntimeClient { runtime })
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .with_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|err| failed(err.to_string()))?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&Resource::builder().with_service_name("jobhost").build());
        Ok(Self {
            processor: Arc::new(processor),
        })
    }

    /// The `tracing` layer that exports job spans, filtered to them.
    pub fn layer<S>(&self) -> Filtered<JobSpanLayer, JobSpans, S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let layer = JobSpanLayer {
            processor: Arc::clone(&self.processor),
            scope: InstrumentationScope::builder("jobhost")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        };
        layer.with_filter(JobSpans)
    }

    /// Send the spans still buffered and stop exporting. Blocks until the collector
    /// answered or the request timed out, so call it outside the runtime's worker threads
    /// (e.g. after `block_on`, or in `spawn_blocking`).
    pub fn shutdown(&self) {
        if let Err(err) = self.processor.shutdown() {
            tracing::warn!(error = %err, "the last job spans were not exported");
        }
    }
}

/// The filter of [`OtlpExport::layer`]: the worker's `job` spans and nothing else, decided
/// once per callsite.
#[derive(Debug, Clone, Copy)]
pub struct JobSpans;

impl JobSpans {
    fn wants(metadata: &Metadata<'_>) -> bool {
        metadata.is_span() && metadata.name() == "job" && metadata.target() == JOB_SPAN_TARGET
    }
}

impl<S> Filter<S> for JobSpans {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::wants(metadata)
    }

    fn callsite_enabled(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if Self::wants(metadata) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::DEBUG)
    }
}

/// Turns each closed `job` span into an OTLP span.
#[derive(Debug)]
pub struct JobSpanLayer {
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
}

/// What a `job` span recorded, kept in its extensions until it closes.
#[derive(Debug, Default)]
struct JobFields {
    trace_id: Option<u128>,
    span_id: Option<u64>,
    parent_id: Option<u64>,
    sampled: bool,
    job_id: String,
    job_type: String,
    attempt: u64,
    plugin: Option<String>,
    start: Option<SystemTime>,
}

impl Visit for JobFields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // The ids and names are recorded with `%`, whose `Debug` is their `Display`.
        let text = format!("{value:?}");
        match field.name() {
            "trace_id" => self.trace_id = u128::from_str_radix(&text, 16).ok(),
            "span_id" => self.span_id = u64::from_str_radix(&text, 16).ok(),
            "parent_id" => self.parent_id = u64::from_str_radix(&text, 16).ok(),
            "job_id" => self.job_id = text,
            "job_type" => self.job_type = text,
            "plugin" => self.plugin = Some(text),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "plugin" {
            self.plugin = Some(value.to_owned());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "attempt" {
            self.attempt = value;
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "sampled" {
            self.sampled = value;
        }
    }
}

impl<S> Layer<S> for JobSpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = JobFields {
            start: Some(SystemTime::now()),
            ..JobFields::default()
        };
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(fields) = span.extensions_mut().get_mut::<JobFields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(fields) = span.extensions_mut().remove::<JobFields>() else {
            return;
        };
        if let Some(data) = self.span_data(fields) {
            self.processor.on_end(data);
        }
    }
}

impl JobSpanLayer {
    /// The OTLP span of a closed job span; `None` when it is not sampled (or lacks ids,
    /// which the worker always records).
    fn span_data(&self, fields: JobFields) -> Option<SpanData> {
        let (trace_id, span_id) = (fields.trace_id?, fields.span_id?);
        if !fields.sampled {
            return None;
        }
        let context = SpanContext::new(
            OtelTraceId::from_bytes(trace_id.to_be_bytes()),
            OtelSpanId::from_bytes(span_id.to_be_bytes()),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let mut attributes = vec![
            KeyValue::new("jobhost.job_id", fields.job_id),
            KeyValue::new("jobhost.job_type", fields.job_type.clone()),
            KeyValue::new(
                "jobhost.attempt",
                i64::try_from(fields.attempt).unwrap_or(i64::MAX),
            ),
        ];
        if let Some(plugin) = fields.plugin {
            attributes.push(KeyValue::new("jobhost.plugin", plugin));
        }
        Some(SpanData {
            span_context: context,
            parent_span_id: fields.parent_id.map_or(OtelSpanId::INVALID, |id| {
                OtelSpanId::from_bytes(id.to_be_bytes())
            }),
            parent_span_is_remote: fields.parent_id.is_some(),
            span_kind: SpanKind::Consumer,
            name: Cow::Owned(fields.job_type),
            start_time: fields.start.unwrap_or_else(SystemTime::now),
            end_time: SystemTime::now(),
            attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        })
    }
}

/// The exporter's HTTP client: each request runs on the host's runtime, awaited from the
/// SDK's export thread.
#[derive(Debug)]
struct RuntimeClient {
    runtime: Handle,
}

#[wasmtime_wasi::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // The timer is made inside the task: the SDK's export thread has no runtime.
        let sent = self
            .runtime
            .spawn(async { tokio::time::timeout(REQUEST_TIMEOUT, send(request)).await });
        sent.await?
            .map_err(|_| "the OTLP collector did not answer in time")?
    }
}

/// One HTTP/1.1 request on a connection of its own.
async fn send(request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri();
    let host = uri.host().ok_or("the endpoint has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
    let stream = TcpStream::connect((host.as_str(), port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert(hyper::header::HOST, authority.parse()?);
    // HTTP/1.1 asks a client to send the origin form to the server itself.
    parts.uri = parts
        .uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .parse()?;
    let response = sender
        .send_request(hyper::Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, ANSWER_MAX).collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}
