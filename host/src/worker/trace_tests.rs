//! What the worker does with a delivery's trace context (see [`crate::trace`]), on the
//! memory backend under a paused clock.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::value::RawValue;

use super::tests::manifest;
use crate::broker::Backend;
use crate::envelope::Envelope;
use crate::job::{FollowUp, Outcome};
use crate::testing::{Harness, native_unit};
use crate::trace::{JobTrace, TraceContext};
use crate::worker::WorkerConfig;

fn incoming() -> TraceContext {
    TraceContext::from_headers(
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some(b"vendor=opaque"),
    )
    .expect("valid")
}

/// Three attempts, 2 s apart.
fn retrying() -> QueueConfig {
    let mut queue = QueueConfig::new("q");
    queue.retry = RetryPolicy::fixed(3, Duration::from_secs(2));
    queue
}

async fn publish(h: &Harness, payload: &str, trace: Option<TraceContext>) -> Envelope {
    let payload = RawValue::from_string(payload.to_owned()).expect("JSON");
    let envelope = Envelope {
        trace,
        ..Envelope::new("job", "q", payload)
    };
    h.backend.publish(&envelope, None).await.expect("publish");
    envelope
}

#[tokio::test(start_paused = true)]
async fn retries_and_the_dead_letter_carry_the_trace_context_the_job_came_with() {
    let unit = native_unit("n", manifest("n", retrying(), &["job"]), |_| {
        Outcome::Failed(JobError::retryable("down"))
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    publish(&h, "{}", Some(incoming())).await;
    h.run_until_idle().await;
    let held = h.backend.deferred("q");
    assert_eq!(held.len(), 2, "two retries");
    for retry in &held {
        assert_eq!(
            retry.envelope.trace,
            Some(incoming()),
            "a retry is a child of the sender, like the first attempt"
        );
    }
    let dead = h.backend.dead_letters("q");
    assert_eq!(
        dead[0].trace,
        Some(incoming()),
        "the dead letter can be found by trace id"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_without_a_traceparent_starts_a_trace_that_its_retries_and_dead_letter_join() {
    let seen = Arc::new(Mutex::new(Vec::<JobTrace>::new()));
    let record = seen.clone();
    let unit = native_unit("n", manifest("n", retrying(), &["job"]), move |job| {
        record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job.trace);
        Outcome::Failed(JobError::retryable("down"))
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    publish(&h, "{}", None).await;
    h.run_until_idle().await;
    let attempts = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(attempts.len(), 3);
    let first = attempts[0];
    assert_eq!(
        first.parent_id, None,
        "the first attempt is the root of a new trace"
    );
    for later in &attempts[1..] {
        assert_eq!(
            later.trace_id, first.trace_id,
            "one trace for every attempt"
        );
        assert_eq!(
            later.parent_id,
            Some(first.span_id),
            "under the first attempt"
        );
    }
    let dead = h.backend.dead_letters("q");
    let carried = dead[0].trace.as_ref().expect("a traced dead letter").parent;
    assert_eq!(
        (carried.trace_id, carried.parent_id),
        (first.trace_id, first.span_id)
    );
}

#[tokio::test(start_paused = true)]
async fn a_deferral_keeps_the_trace_context() {
    let unit = native_unit("n", manifest("n", QueueConfig::new("q"), &["job"]), |job| {
        if job.deferrals == 0 {
            Outcome::Failed(JobError::deferred(Duration::from_secs(1)))
        } else {
            Outcome::Completed { follow_ups: vec![] }
        }
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    publish(&h, "{}", Some(incoming())).await;
    h.run_until_idle().await;
    let held = h.backend.deferred("q");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].envelope.trace, Some(incoming()));
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_is_a_child_of_the_attempt_that_enqueued_it() {
    let seen = Arc::new(Mutex::new(Vec::<JobTrace>::new()));
    let record = seen.clone();
    let unit = native_unit(
        "n",
        manifest("n", QueueConfig::new("q"), &["job"]),
        move |job| {
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(job.trace);
            let follow_up = FollowUp {
                job_id: uuid::Uuid::new_v4(),
                job_type: "job".into(),
                payload: RawValue::from_string("\"second\"".into()).expect("JSON"),
                delay: None,
                batch: None,
            };
            Outcome::Completed {
                follow_ups: (job.payload == b"\"first\"")
                    .then_some(follow_up)
                    .into_iter()
                    .collect(),
            }
        },
    );
    let h = Harness::start([unit], WorkerConfig::default()).await;
    let first = publish(&h, "\"first\"", Some(incoming())).await;
    h.run_until_idle().await;
    let attempts = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let parent = attempts[0];
    assert_eq!(parent.trace_id, incoming().parent.trace_id);
    assert_eq!(parent.parent_id, Some(incoming().parent.parent_id));
    let follow_up = h
        .backend
        .acked("q")
        .into_iter()
        .find(|envelope| envelope.job_id != first.job_id)
        .expect("the follow-up ran");
    let context = follow_up.trace.expect("a traced follow-up");
    assert_eq!(
        (context.parent.trace_id, context.parent.parent_id),
        (parent.trace_id, parent.span_id),
        "same trace, the enqueueing attempt as parent"
    );
    assert_eq!(
        context.state,
        incoming().state,
        "the tracestate rides along"
    );
    assert_eq!(
        attempts[1].parent_id,
        Some(parent.span_id),
        "the follow-up's own span is the enqueuing attempt's child"
    );
}
