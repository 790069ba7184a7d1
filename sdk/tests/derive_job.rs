//! What `#[derive(Job)]` expands to: name, queue, retry policy and timeout.

use std::time::Duration;

use jobhost_sdk::{Backoff, Job, Queues, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum AppQueues {
    #[queue(retry(max_attempts = 3, backoff = "exponential", base = "1s", max = "2m"))]
    Images,
    #[queue(retry(backoff = "fixed", delay = "10s"), timeout = "1m")]
    Emails,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Images, retry(max_attempts = 5))]
struct ResizeImage {
    path: String,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = AppQueues::Emails, name = "send-email", timeout = "2 m")]
struct SendEmail {
    to: String,
}

mod billing {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize, jobhost_sdk::Job)]
    #[job(queue = crate::AppQueues::Emails, retry(backoff = "none", max_attempts = 2))]
    pub(crate) struct Invoice;
}

/// The queue a job type is published to, through the trait only.
fn queue_of<J: Job>() -> J::Queues {
    J::QUEUE
}

#[test]
fn the_chapter_example_gives_the_job_its_own_complete_policy() {
    assert_eq!(
        ResizeImage::retry_policy(),
        Some(RetryPolicy::exponential(5))
    );
    let queue_policy = RetryPolicy::new(
        3,
        Backoff::Exponential {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(120),
            jitter: true,
        },
    );
    assert_eq!(
        AppQueues::Images.config().retry,
        queue_policy,
        "the queue's policy is intact"
    );
}

#[test]
fn a_job_retry_replaces_the_queue_policy_without_merging() {
    assert_eq!(
        AppQueues::Emails.config().retry.backoff,
        Backoff::Fixed(Duration::from_secs(10))
    );
    assert_eq!(
        billing::Invoice::retry_policy(),
        Some(RetryPolicy::new(2, Backoff::None))
    );
}

#[test]
fn a_job_without_retry_has_no_policy_of_its_own() {
    assert_eq!(
        SendEmail::retry_policy(),
        None,
        "the queue's policy applies"
    );
}

#[test]
fn the_default_name_is_the_module_path_and_the_type_name() {
    assert_eq!(ResizeImage::NAME, "derive_job::ResizeImage");
    assert_eq!(billing::Invoice::NAME, "derive_job::billing::Invoice");
}

#[test]
fn an_explicit_name_is_used_verbatim() {
    assert_eq!(SendEmail::NAME, "send-email");
}

#[test]
fn the_queue_path_names_both_the_queue_set_and_the_queue() {
    assert_eq!(queue_of::<ResizeImage>(), AppQueues::Images);
    assert_eq!(
        queue_of::<billing::Invoice>(),
        AppQueues::Emails,
        "a path through `crate`"
    );
}

#[test]
fn a_job_timeout_is_its_own_and_absent_by_default() {
    assert_eq!(SendEmail::timeout(), Some(Duration::from_secs(120)));
    assert_eq!(ResizeImage::timeout(), None, "the queue's timeout applies");
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    queue = AppQueues::Images,
    name = "limited",
    concurrency(key = "customer_id", limit = 2),
    rate(key = "customer_id", limit = "10/m", respect_retry_after)
)]
struct Limited {
    customer_id: String,
}

#[test]
fn a_job_declares_a_cap_and_a_rate_per_key_of_its_payload() {
    use jobhost_sdk::limits::{KeyCap, KeyRate, Rate, RateUnit};
    let limits = Limited::limits();
    assert_eq!(
        limits.concurrency,
        Some(KeyCap {
            key: "customer_id".to_owned(),
            limit: 2
        })
    );
    let rate = Rate {
        count: 10,
        unit: RateUnit::Minute,
        burst: 10,
    };
    let key = Some("customer_id".to_owned());
    assert_eq!(
        limits.rate,
        Some(KeyRate {
            key,
            rate,
            respect_retry_after: true
        })
    );
    assert_eq!(ResizeImage::limits(), Default::default(), "none by default");
}
