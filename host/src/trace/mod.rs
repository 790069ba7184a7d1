//! Trace context across jobs: W3C `traceparent`/`tracestate` on messages, and the span
//! each job attempt runs in.
//!
//! Knows neither lapin nor wasmtime: the broker codecs read and write the two headers
//! with [`TraceContext::from_headers`] and `Display`, the worker starts a
//! [`DeliveryTrace`] per delivery.
//!
//! # The rules
//! 1. **Incoming.** A message whose `traceparent` header (an AMQP string, long or short)
//!    is valid W3C version `00` (or a later version read as `00`) is part of that trace:
//!    the attempt's span has the header's trace id, the header's parent id as its parent,
//!    and a span id of its own, freshly drawn. A `tracestate` header rides along, kept
//!    only if bounded and printable (see [`context`]).
//! 2. **No header, or one that is not valid** (garbage, too long, not a string): the
//!    attempt starts a new trace, its span the root. Nothing of the invalid value is kept
//!    or logged.
//! 3. **Retries, deferrals and dead letters** carry the incoming `traceparent` unchanged
//!    (every attempt is a child of the sender's span), or, for a message that came without
//!    one, the first attempt's trace and span, so every attempt of a job shares one trace
//!    id and a dead letter can be found by it (its headers carry it).
//! 4. **Follow-ups** enqueued by a handler carry the same trace id with the attempt's span
//!    as parent.
//! 5. **Producers** ([`Producer`](crate::producer::Producer), `jobhost enqueue`,
//!    `POST /jobs`) start a new trace unless given a `traceparent`.
//! 6. **`correlation_id`** in the envelope (queuey's) is the sender's own opaque id: it is
//!    carried unchanged to retries, deferrals, dead letters and follow-ups, and is never
//!    read as a trace context, however it looks.
//!
//! # Export
//! With the cargo feature `otlp` and `run --otlp-endpoint URL`, each job span is exported
//! over OTLP/HTTP in its trace (module `otlp`). Without the feature nothing of it is compiled.
//!
//! # Cost
//! Per delivery: a lookup of the `traceparent` header, and two draws of the thread's
//! random generator for the ids; nothing is allocated when no `tracestate` comes. The ids
//! are formatted only where a line is written or a message published.

pub mod context;
mod job;
#[cfg(feature = "otlp")]
pub mod otlp;

pub use context::{SpanId, TraceContext, TraceId, TraceParent, TraceState};
pub use job::{DeliveryTrace, JobTrace};

/// The AMQP header (and W3C field) name of the trace parent.
pub const TRACEPARENT: &str = "traceparent";

/// The AMQP header (and W3C field) name of the trace state.
pub const TRACESTATE: &str = "tracestate";
