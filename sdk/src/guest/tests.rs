//! The guest glue, natively: manifests and outcomes as the host will read them. (The
//! imports are unreachable stubs off wasm, so nothing here logs or panics.)

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bindings::jobhost::plugin::types;
use super::{dispatch, manifest, millis};
use crate::{Backoff, Job, JobContext, JobError, QueueConfig, Queues, RetryPolicy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TestQueues {
    Plain,
    Tuned,
}

impl Queues for TestQueues {
    fn all() -> &'static [Self] {
        &[Self::Plain, Self::Tuned]
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Plain => "t.plain",
            Self::Tuned => "t.tuned",
        }
    }

    fn config(&self) -> QueueConfig {
        let mut config = QueueConfig::new(self.name());
        if *self == Self::Tuned {
            config.prefetch = 4;
            config.max_priority = 0;
            config.message_ttl = Some(Duration::from_secs(60));
            config.timeout = Some(Duration::from_millis(1500));
            config.retry = RetryPolicy::new(
                3,
                Backoff::Exponential {
                    base: Duration::from_millis(500),
                    factor: 3.0,
                    max: Duration::from_secs(10),
                    jitter: false,
                },
            );
        }
        config
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Outcome {
    kind: String,
}

impl Job for Outcome {
    const NAME: &'static str = "t.Outcome";
    type Queues = TestQueues;
    const QUEUE: TestQueues = TestQueues::Tuned;

    fn retry_policy() -> Option<RetryPolicy> {
        Some(RetryPolicy::fixed(5, Duration::from_secs(2)))
    }

    fn timeout() -> Option<Duration> {
        Some(Duration::from_secs(30))
    }
}

/// Fails as the payload says, after checking it sees the delivery's context.
fn outcome(job: Outcome, ctx: &JobContext) -> Result<(), JobError> {
    assert_eq!(ctx.attempt(), 2, "the handler sees the delivery's attempt");
    match job.kind.as_str() {
        "retryable" => Err(JobError::retryable("service is down")),
        "fatal" => Err(JobError::fatal("bad input")),
        "deferred" => Err(JobError::deferred_because(
            Duration::from_millis(1500),
            "rate limited",
        )),
        _ => Ok(()),
    }
}

fn context() -> JobContext {
    JobContext::new(types::JobContext {
        job_id: "4f0c0d8e-1d3b-4b8e-9a53-2f3c6a1d9e01".to_owned(),
        job_type: Outcome::NAME.to_owned(),
        queue: "t.tuned".to_owned(),
        attempt: 2,
        max_attempts: 5,
        deferrals: 1,
        priority: 7,
        age: 2_500,
    })
}

fn run(payload: &str) -> Result<(), types::JobError> {
    dispatch::run::<Outcome>(outcome, payload.as_bytes(), &context())
}

#[test]
fn the_manifest_names_the_plugin_and_lists_every_queue_and_job() {
    let manifest = manifest::manifest::<TestQueues>(
        "my-plugin",
        vec![manifest::job_config::<TestQueues, Outcome>()],
    );
    assert_eq!(manifest.name, "my-plugin");
    let queues: Vec<&str> = manifest.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(
        queues,
        ["t.plain", "t.tuned"],
        "every queue, in declaration order"
    );
    assert_eq!(manifest.jobs.len(), 1);
    assert_eq!(manifest.jobs[0].name, "t.Outcome");
    assert_eq!(manifest.jobs[0].queue, "t.tuned");
}

#[test]
fn a_queue_with_the_default_policy_declares_none() {
    let manifest = manifest::manifest::<TestQueues>("p", Vec::new());
    let plain = &manifest.queues[0];
    assert!(
        plain.retry.is_none(),
        "the default policy travels as `none`"
    );
    assert_eq!(
        (
            plain.prefetch,
            plain.durable,
            plain.max_priority,
            plain.message_ttl,
            plain.timeout
        ),
        (16, true, 10, None, None),
        "queue defaults travel unchanged"
    );
}

#[test]
fn queue_settings_and_policies_travel_in_milliseconds() {
    let manifest = manifest::manifest::<TestQueues>("p", Vec::new());
    let tuned = &manifest.queues[1];
    assert_eq!((tuned.prefetch, tuned.max_priority), (4, 0));
    assert_eq!(
        (tuned.message_ttl, tuned.timeout),
        (Some(60_000), Some(1_500))
    );
    let retry = tuned
        .retry
        .as_ref()
        .expect("a queue policy other than the default");
    assert_eq!(retry.max_attempts, 3);
    let types::Backoff::Exponential(backoff) = &retry.backoff else {
        panic!(
            "an exponential policy stays exponential, got {:?}",
            retry.backoff
        );
    };
    assert_eq!(
        (backoff.base, backoff.factor, backoff.max, backoff.jitter),
        (500, 3.0, 10_000, false)
    );
}

#[test]
fn a_job_carries_its_own_policy_and_timeout() {
    let job = manifest::job_config::<TestQueues, Outcome>();
    let retry = job.retry.expect("the job's own policy");
    assert_eq!(retry.max_attempts, 5);
    assert!(
        matches!(retry.backoff, types::Backoff::Fixed(2_000)),
        "{:?}",
        retry.backoff
    );
    assert_eq!(job.timeout, Some(30_000));
}

#[test]
fn handler_outcomes_map_to_the_wit_variants() {
    assert!(run(r#"{"kind": "ok"}"#).is_ok());
    assert!(matches!(
        run(r#"{"kind": "retryable"}"#),
        Err(types::JobError::Retryable(msg)) if msg == "service is down"
    ));
    assert!(matches!(
        run(r#"{"kind": "fatal"}"#),
        Err(types::JobError::Fatal(msg)) if msg == "bad input"
    ));
    assert!(matches!(
        run(r#"{"kind": "deferred"}"#),
        Err(types::JobError::Deferred(types::Deferral { delay: 1500, reason, retry_after: false })) if reason == "rate limited"
    ));
}

#[test]
fn a_payload_that_does_not_decode_is_a_decode_error_with_serdes_message() {
    let err = run(r#"{"kind": 42}"#).expect_err("a number is not a string");
    let types::JobError::Decode(msg) = err else {
        panic!("a bad payload is a decode error, got {err:?}");
    };
    assert!(
        msg.starts_with("invalid type: integer `42`, expected a string"),
        "{msg}"
    );
}

#[test]
fn the_context_reports_the_delivery() {
    let ctx = context();
    assert_eq!(ctx.job_id(), "4f0c0d8e-1d3b-4b8e-9a53-2f3c6a1d9e01");
    assert_eq!((ctx.job_type(), ctx.queue()), ("t.Outcome", "t.tuned"));
    assert_eq!(
        (ctx.attempt(), ctx.max_attempts(), ctx.deferrals()),
        (2, 5, 1)
    );
    assert_eq!(ctx.priority(), 7);
    assert_eq!(ctx.age(), Duration::from_millis(2_500));
}

#[test]
fn durations_beyond_u64_milliseconds_saturate() {
    assert_eq!(millis(Duration::from_millis(1500)), 1500);
    assert_eq!(millis(Duration::MAX), u64::MAX);
}

#[test]
fn an_enqueue_error_names_its_cause_in_its_message_and_only_there() {
    let cause = serde_json::from_str::<u8>("x").expect_err("`x` is no number");
    let err = crate::EnqueueError::Encode {
        job_type: "t.Job",
        cause,
    };
    assert_eq!(
        err.to_string(),
        "could not encode the payload of `t.Job`: expected value at line 1 column 1"
    );
    assert!(
        std::error::Error::source(&err).is_none(),
        "a printed chain would repeat the cause"
    );
}
