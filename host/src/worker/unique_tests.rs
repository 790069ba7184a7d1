//! Unique jobs on the memory backend under a paused clock: a second enqueue of a key whose
//! job is queued, held or running is refused with that job's id; the key is free again
//! once the job settles for good, or `for` after it was taken.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;
use uuid::Uuid;

use super::settle::unique_lock;
use crate::broker::{BrokerError, MemoryBackend, UniqueLock};
use crate::envelope::Envelope;
use crate::job::Outcome;
use crate::policy::Granularity;
use crate::producer::{EnqueueOptions, publish_first_attempt};
use crate::testing::{Harness, native_unit};
use crate::worker::WorkerConfig;

const TEN_MINUTES: Duration = Duration::from_secs(600);

/// An enqueue refused during an attempt: the attempt, and the holder it named.
type Refusal = (u32, Option<Uuid>);

/// A queue whose failed attempts wait 10 s before the next, two attempts in all.
fn retrying_twice() -> QueueConfig {
    let mut queue = QueueConfig::new("q");
    queue.retry = RetryPolicy::fixed(2, Duration::from_secs(10));
    queue
}

/// Enqueue a `job_type` job unique by `key` for `for_`, after `delay` when there is one,
/// the way producers, `POST /jobs` and the CLI do; the new job's id, or why it was refused.
async fn enqueue_unique(
    backend: &MemoryBackend,
    job_type: &str,
    key: &str,
    for_: Duration,
    delay: Option<Duration>,
) -> Result<Uuid, BrokerError> {
    let mut options = EnqueueOptions::new().unique(key, for_);
    if let Some(delay) = delay {
        options = options.delay(delay);
    }
    let payload = serde_json::value::to_raw_value(&json!({ "key": key })).expect("json");
    let (envelope, delay) = options.first_attempt(job_type, "q", payload)?;
    publish_first_attempt(backend, &envelope, delay, Granularity::default()).await?;
    Ok(envelope.job_id)
}

/// The id a refused enqueue names as the holder of its key.
fn holder(refused: Result<Uuid, BrokerError>) -> Option<Uuid> {
    match refused {
        Err(BrokerError::Duplicate { existing, .. }) => existing,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

/// A harness serving `job` and `other` on `q` with `handler`.
async fn harness(handler: impl Fn(u32) -> Outcome + Send + Sync + 'static) -> Harness {
    let manifest = super::tests::manifest("n", retrying_twice(), &["job", "other"]);
    let unit = native_unit("n", manifest, move |job| handler(job.attempt));
    Harness::start([unit], WorkerConfig::default()).await
}

fn completed() -> Outcome {
    Outcome::Completed { follow_ups: vec![] }
}

#[tokio::test(start_paused = true)]
async fn a_second_enqueue_of_a_held_key_is_refused_with_the_first_jobs_id_until_it_completes() {
    let h = harness(|_| completed()).await;
    let later = Some(Duration::from_secs(60));
    let first = enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, later)
        .await
        .expect("the first job takes the key");
    let again = enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, None).await;
    assert_eq!(holder(again), Some(first), "refused, naming the holder");
    assert_eq!(
        h.backend.waiting("q") + h.backend.ready("q"),
        1,
        "a refused enqueue publishes nothing"
    );
    enqueue_unique(&h.backend, "job", "other key", TEN_MINUTES, later)
        .await
        .expect("another key is free");
    enqueue_unique(&h.backend, "other", "k", TEN_MINUTES, later)
        .await
        .expect("a key is scoped by its job type");
    h.run_until_idle().await;
    enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, None)
        .await
        .expect("a completed job lets go of its key");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_running_job_and_its_retry_keep_the_key_and_its_dead_letter_frees_it() {
    let backend: Arc<OnceLock<MemoryBackend>> = Arc::new(OnceLock::new());
    let refusals: Arc<Mutex<Vec<Refusal>>> = Arc::default();
    let (inside, seen) = (Arc::clone(&backend), Arc::clone(&refusals));
    let h = harness(move |attempt| {
        // The memory backend answers without waiting, so the enqueue completes at once.
        let backend = inside.get().expect("set before the job is enqueued");
        let tried = enqueue_unique(backend, "job", "k", TEN_MINUTES, None)
            .now_or_never()
            .expect("the memory backend never waits");
        seen.lock()
            .expect("not poisoned")
            .push((attempt, holder(tried)));
        Outcome::Failed(JobError::retryable("down"))
    })
    .await;
    backend.set(h.backend.clone()).expect("set once");
    let first = enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, None)
        .await
        .expect("the first job takes the key");
    h.run_until_idle().await;
    assert_eq!(
        *refusals.lock().expect("not poisoned"),
        [(1, Some(first)), (2, Some(first))],
        "refused while the job runs, and while its retry waits and runs"
    );
    assert_eq!(h.backend.dead_letters("q").len(), 1, "dead-lettered");
    enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, Some(TEN_MINUTES))
        .await
        .expect("a dead-lettered job lets go of its key");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_job_never_settles_is_free_for_after_it_was_taken() {
    let h = harness(|_| completed()).await;
    let minute = Duration::from_secs(60);
    let first = enqueue_unique(&h.backend, "job", "k", minute, Some(TEN_MINUTES))
        .await
        .expect("the first job takes the key");
    tokio::time::advance(minute - Duration::from_millis(1)).await;
    let early = enqueue_unique(&h.backend, "job", "k", minute, None).await;
    assert_eq!(holder(early), Some(first), "held until `for` ends");
    tokio::time::advance(Duration::from_millis(1)).await;
    let second = enqueue_unique(&h.backend, "job", "k", minute, Some(TEN_MINUTES))
        .await
        .expect("free once `for` ended, though the first job still waits");
    assert_ne!(second, first);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_out_of_range_key_or_for_is_refused_and_takes_nothing() {
    let h = harness(|_| completed()).await;
    let huge = "k".repeat(1 << 20);
    for (key, for_) in [
        (huge.as_str(), TEN_MINUTES),
        ("", TEN_MINUTES),
        ("k", Duration::ZERO),
    ] {
        let refused = enqueue_unique(&h.backend, "job", key, for_, None).await;
        assert!(
            matches!(refused, Err(BrokerError::InvalidUnique { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(h.backend.ready("q"), 0, "nothing published");
    enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, None)
        .await
        .expect("a refused enqueue took no key");
    h.shutdown().await;
}

#[test]
fn the_lock_a_settled_job_lets_go_of_is_read_from_its_envelope_or_from_a_poison_body() {
    let lock = UniqueLock::new("job", "k", TEN_MINUTES).expect("valid");
    let payload = serde_json::value::to_raw_value(&json!({})).expect("json");
    let job = Envelope {
        unique_lock: Some(lock.name().to_owned()),
        ..Envelope::new("job", "q", payload)
    };
    let found = Some((lock, job.job_id));
    assert_eq!(unique_lock(Some(&job), b""), found, "from the envelope");
    assert_eq!(
        unique_lock(None, &job.encode()),
        found,
        "from a poison body"
    );
    assert_eq!(unique_lock(None, b"not an envelope"), None);
    let elsewhere = Envelope {
        unique_lock: Some("app.emails".to_owned()),
        ..job
    };
    assert_eq!(
        unique_lock(Some(&elsewhere), b""),
        None,
        "a name that is not a lock's is ignored"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_job_lets_go_of_its_key() {
    let h = harness(|_| completed()).await;
    let payload = serde_json::value::to_raw_value(&json!({})).expect("json");
    // Expires at once: delivered, it is settled as expired without running.
    let options = EnqueueOptions::new()
        .unique("k", TEN_MINUTES)
        .expires_in(Duration::ZERO);
    let (envelope, delay) = options.first_attempt("job", "q", payload).expect("valid");
    publish_first_attempt(&h.backend, &envelope, delay, Granularity::default())
        .await
        .expect("enqueued");
    h.run_until_idle().await;
    let reasons = h.dead_letter_reasons("q");
    assert!(
        reasons.len() == 1 && reasons[0].starts_with("expired: "),
        "{reasons:?}"
    );
    enqueue_unique(&h.backend, "job", "k", TEN_MINUTES, None)
        .await
        .expect("an expired job lets go of its key");
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_of_a_job_type_declared_unique_is_not_enqueued_while_its_key_is_held() {
    use crate::job::FollowUp;
    use jobhost_sdk::limits::{JobLimits, UniqueKey};
    let follow_up = |key: &str| FollowUp {
        job_id: Uuid::new_v4(),
        job_type: "other".to_owned(),
        payload: serde_json::value::to_raw_value(&json!({ "k": key })).expect("json"),
        delay: Some(Duration::from_secs(60)),
        batch: None,
    };
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&ran);
    let mut manifest = super::tests::manifest("n", retrying_twice(), &["job", "other"]);
    let declared = JobLimits {
        unique: Some(UniqueKey {
            key: "k".to_owned(),
            for_: TEN_MINUTES,
        }),
        ..JobLimits::default()
    };
    manifest.limits.jobs.insert("other".to_owned(), declared);
    let unit = native_unit("n", manifest, move |job| {
        let payload = std::str::from_utf8(job.payload).expect("JSON").to_owned();
        seen.lock().expect("not poisoned").push(payload);
        match job.job_type {
            // Asks for key a twice and key b once: the second a is a duplicate.
            "job" => Outcome::Completed {
                follow_ups: vec![follow_up("a"), follow_up("a"), follow_up("b")],
            },
            _ => completed(),
        }
    });
    let h = Harness::start([unit], WorkerConfig::default()).await;
    h.enqueue("job", json!({ "parent": 1 })).await;
    h.run_until_idle().await;
    let ran = ran.lock().expect("not poisoned").clone();
    assert_eq!(
        ran,
        [r#"{"parent":1}"#, r#"{"k":"a"}"#, r#"{"k":"b"}"#],
        "the parent completed once and each key ran once"
    );
    assert!(h.backend.dead_letters("q").is_empty(), "nothing failed");
    let payload = serde_json::value::to_raw_value(&json!({ "k": "a" })).expect("json");
    let (envelope, _) = EnqueueOptions::new()
        .unique("a", TEN_MINUTES)
        .first_attempt("other", "q", payload)
        .expect("in range");
    publish_first_attempt(&h.backend, &envelope, None, Granularity::default())
        .await
        .expect("the follow-up that ran let go of its key");
    h.shutdown().await;
}
