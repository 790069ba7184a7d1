//! What `#[derive(Queues)]` expands to: every form of the grammar becomes the expected
//! `QueueConfig`, name and `RetryPolicy`.

use std::time::Duration;

use jobhost_sdk::{Backoff, QueueConfig, Queues, RetryPolicy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "myapp")]
enum AppQueues {
    #[queue(retry(max_attempts = 3, backoff = "exponential", base = "1s", max = "2m"))]
    Images,
    Emails,
    HTTPCalls,
    #[queue(name = "legacy.reports")]
    Reports,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum Tuned {
    #[queue(
        prefetch = 1,
        durable = false,
        max_priority = 0,
        message_ttl = "500ms",
        timeout = "30s"
    )]
    Lowest,
    #[queue(
        prefetch = 65535,
        max_priority = 255,
        message_ttl = "1d",
        timeout = "30"
    )]
    Highest,
    #[queue(retry(backoff = "fixed", delay = "2 m"))]
    Fixed,
    #[queue(retry(max_attempts = 4, backoff = "none"))]
    AtOnce,
    #[queue(retry(
        max_attempts = 6,
        factor = 3,
        base = "250ms",
        max = "1h",
        jitter = false
    ))]
    Steep,
    #[queue(retry())]
    Defaults,
}

fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[test]
fn the_chapter_example_gives_the_queue_its_exponential_policy() {
    let expected = RetryPolicy::new(
        3,
        Backoff::Exponential {
            base: secs(1),
            factor: 2.0,
            max: secs(120),
            jitter: true,
        },
    );
    assert_eq!(AppQueues::Images.config().retry, expected);
}

#[test]
fn a_queue_without_retry_gets_the_default_policy_of_one_attempt() {
    assert_eq!(AppQueues::Emails.config().retry, RetryPolicy::default());
    assert_eq!(
        AppQueues::Emails.config().retry.max_attempts,
        1,
        "no retry means no retries"
    );
}

#[test]
fn default_names_are_the_snake_cased_variant_after_the_prefix() {
    assert_eq!(AppQueues::Images.name(), "myapp.images");
    assert_eq!(AppQueues::HTTPCalls.name(), "myapp.http_calls");
    assert_eq!(Tuned::AtOnce.name(), "at_once", "no prefix, no dot");
}

#[test]
fn an_explicit_name_is_used_verbatim_without_the_prefix() {
    assert_eq!(AppQueues::Reports.name(), "legacy.reports");
    assert_eq!(AppQueues::Reports.config().name, "legacy.reports");
}

#[test]
fn all_lists_every_queue_in_declaration_order() {
    use AppQueues::*;
    assert_eq!(AppQueues::all(), [Images, Emails, HTTPCalls, Reports]);
}

#[test]
fn a_queue_without_keys_has_every_default() {
    assert_eq!(AppQueues::Emails.config(), QueueConfig::new("myapp.emails"));
}

#[test]
fn queue_settings_and_every_duration_form_are_read() {
    let lowest = Tuned::Lowest.config();
    assert_eq!(
        (lowest.prefetch, lowest.durable, lowest.max_priority),
        (1, false, 0)
    );
    assert_eq!(lowest.message_ttl, Some(Duration::from_millis(500)));
    assert_eq!(lowest.timeout, Some(secs(30)));
    let highest = Tuned::Highest.config();
    assert_eq!(
        (highest.prefetch, highest.durable, highest.max_priority),
        (65535, true, 255)
    );
    assert_eq!(highest.message_ttl, Some(secs(86_400)), "`1d` is a day");
    assert_eq!(
        highest.timeout,
        Some(secs(30)),
        "a bare integer means seconds"
    );
    assert_eq!(
        Tuned::Fixed.config().retry,
        RetryPolicy::fixed(3, secs(120)),
        "`2 m`"
    );
}

#[test]
fn every_backoff_form_expands_to_its_policy() {
    assert_eq!(
        Tuned::AtOnce.config().retry,
        RetryPolicy::new(4, Backoff::None)
    );
    let steep = Backoff::Exponential {
        base: Duration::from_millis(250),
        factor: 3.0,
        max: secs(3600),
        jitter: false,
    };
    assert_eq!(
        Tuned::Steep.config().retry,
        RetryPolicy::new(6, steep),
        "an integer factor"
    );
    assert_eq!(
        Tuned::Defaults.config().retry,
        RetryPolicy::exponential(3),
        "`retry()` is three attempts with the default exponential backoff"
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum Patient {
    #[queue(retry(backoff = "fixed", delay = "2147483647ms"))]
    Longest,
}

#[test]
fn a_wait_of_exactly_the_longest_hold_compiles_and_is_max_delay() {
    assert_eq!(
        Patient::Longest.config().retry.backoff,
        Backoff::Fixed(jobhost_sdk::MAX_DELAY),
        "the derives' limit is the SDK's `MAX_DELAY`, inclusive"
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
enum Limited {
    #[queue(concurrency = 4, rate = "50/s", burst = 20)]
    Capped,
    Free,
}

#[test]
fn a_queue_declares_its_fleet_wide_cap_and_rate_and_others_declare_none() {
    use jobhost_sdk::limits::{QueueLimits, Rate, RateUnit};
    assert_eq!(
        Limited::Capped.limits(),
        QueueLimits {
            concurrency: Some(4),
            rate: Some(Rate {
                count: 50,
                unit: RateUnit::Second,
                burst: 20
            }),
        }
    );
    assert_eq!(Limited::Free.limits(), QueueLimits::default());
}
