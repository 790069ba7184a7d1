//! One delivery's place in its trace: the span the attempt runs in, and what the messages
//! it publishes carry.

use super::context::{SpanId, TraceContext, TraceId, TraceParent};

/// The span of one attempt of a job: its trace, its own freshly drawn id, and its parent.
///
/// Plain ids, `Copy`: starting one costs two draws of the thread's random generator and
/// no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTrace {
    /// The trace: the incoming one, or a new one when the message carried none.
    pub trace_id: TraceId,
    /// This attempt's own span id, new for every delivery.
    pub span_id: SpanId,
    /// The span that sent the message, when it carried a valid `traceparent`.
    pub parent_id: Option<SpanId>,
    /// The trace flags, passed on unchanged; a new trace is sampled.
    pub flags: u8,
}

impl JobTrace {
    /// The span of a delivery whose message carried `incoming` (its `traceparent`, when
    /// valid): a child of it, or the root of a new trace.
    pub fn start(incoming: Option<&TraceParent>) -> Self {
        match incoming {
            Some(parent) => Self {
                trace_id: parent.trace_id,
                span_id: SpanId::random(),
                parent_id: Some(parent.parent_id),
                flags: parent.flags,
            },
            None => Self {
                trace_id: TraceId::random(),
                span_id: SpanId::random(),
                parent_id: None,
                flags: TraceParent::SAMPLED,
            },
        }
    }

    /// Whether the trace is sampled: the incoming `sampled` flag, or a new trace.
    pub fn sampled(&self) -> bool {
        self.flags & TraceParent::SAMPLED != 0
    }

    /// The `traceparent` of a job this attempt enqueues: same trace, this span as parent.
    pub fn child(&self) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            parent_id: self.span_id,
            flags: self.flags,
        }
    }

    /// The `traceparent` a retry, deferral or dead letter of this delivery carries: the
    /// incoming one unchanged, so every attempt is a child of the sender's span; for a
    /// message that came without one, this first attempt's span, so later attempts join
    /// its trace under it.
    pub fn carried(&self) -> TraceParent {
        match self.parent_id {
            Some(parent_id) => TraceParent {
                parent_id,
                ..self.child()
            },
            None => self.child(),
        }
    }
}

/// What a delivery's trace context becomes: the attempt's span, and the contexts of what
/// it publishes.
#[derive(Debug, Clone)]
pub struct DeliveryTrace {
    /// The attempt's span.
    pub job: JobTrace,
    /// What retries, deferrals and dead letters carry ([`JobTrace::carried`] and the
    /// incoming `tracestate`).
    pub carried: TraceContext,
}

impl DeliveryTrace {
    /// Start the span of a delivery that carried `incoming`.
    pub fn start(incoming: Option<TraceContext>) -> Self {
        let (parent, state) = match incoming {
            Some(TraceContext { parent, state }) => (Some(parent), state),
            None => (None, None),
        };
        let job = JobTrace::start(parent.as_ref());
        Self {
            carried: TraceContext {
                parent: job.carried(),
                state,
            },
            job,
        }
    }

    /// The context of a follow-up job: a child of this attempt's span, with the incoming
    /// `tracestate`.
    pub fn follow_up(&self) -> TraceContext {
        TraceContext {
            parent: self.job.child(),
            state: self.carried.state.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming() -> TraceContext {
        TraceContext::from_headers(
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some(b"rojo=1"),
        )
        .expect("valid")
    }

    #[test]
    fn a_delivery_with_a_traceparent_joins_its_trace_under_the_sender() {
        let incoming = incoming();
        let trace = DeliveryTrace::start(Some(incoming.clone()));
        assert_eq!(trace.job.trace_id, incoming.parent.trace_id);
        assert_eq!(trace.job.parent_id, Some(incoming.parent.parent_id));
        assert_ne!(
            trace.job.span_id, incoming.parent.parent_id,
            "a span of its own"
        );
        assert_eq!(
            trace.carried, incoming,
            "retries and dead letters carry the incoming context unchanged"
        );
    }

    #[test]
    fn a_follow_up_is_a_child_of_the_attempts_span_and_keeps_the_tracestate() {
        let trace = DeliveryTrace::start(Some(incoming()));
        let follow_up = trace.follow_up();
        assert_eq!(follow_up.parent.trace_id, trace.job.trace_id);
        assert_eq!(follow_up.parent.parent_id, trace.job.span_id);
        assert_eq!(follow_up.state, incoming().state);
    }

    #[test]
    fn a_delivery_without_a_traceparent_starts_a_trace_its_retries_join() {
        let first = DeliveryTrace::start(None);
        assert_eq!(first.job.parent_id, None, "the root of a new trace");
        assert!(first.carried.parent.sampled());
        assert_eq!(first.carried.parent.trace_id, first.job.trace_id);
        assert_eq!(first.carried.parent.parent_id, first.job.span_id);
        let second = DeliveryTrace::start(Some(first.carried.clone()));
        assert_eq!(second.job.trace_id, first.job.trace_id, "one trace per job");
        assert_eq!(second.job.parent_id, Some(first.job.span_id));
        assert_eq!(
            second.carried, first.carried,
            "a third attempt joins the same way"
        );
    }

    #[test]
    fn every_attempt_draws_a_span_id_of_its_own() {
        let a = DeliveryTrace::start(Some(incoming()));
        let b = DeliveryTrace::start(Some(incoming()));
        assert_ne!(a.job.span_id, b.job.span_id);
    }

    #[test]
    fn an_unsampled_sender_is_passed_on_unsampled() {
        let incoming = TraceContext::from_headers(
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            None,
        );
        let trace = DeliveryTrace::start(incoming);
        assert!(!trace.follow_up().parent.sampled());
        assert!(!trace.carried.parent.sampled());
    }
}
