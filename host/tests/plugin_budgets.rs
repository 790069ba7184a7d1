//! A guest that floods the host imports costs one attempt, named after the budget it
//! overran; the host's memory under floods is measured in `plugin_flood_memory.rs`.

mod plugin_support;

use jobhost::job::Outcome;
use jobhost::text::{MARKER_MAX, REASON_MAX};
use jobhost_sdk::JobError;
use plugin_support::floods::{FLOODS, flood};

#[tokio::test]
async fn each_host_call_flood_costs_one_attempt_with_a_reason_naming_its_budget() {
    for (mode, expected) in FLOODS {
        let outcome = flood(mode).await;
        let Outcome::Crashed(reason) = outcome else {
            panic!("flood `{mode}` crashes the attempt, got {outcome:?}");
        };
        assert!(
            reason.starts_with(expected),
            "flood `{mode}`: the reason names the budget: {reason}"
        );
        assert!(
            reason.len() <= REASON_MAX + MARKER_MAX,
            "flood `{mode}`: the reason is bounded: {} bytes",
            reason.len()
        );
    }
}

#[tokio::test]
async fn a_job_within_its_budget_completes_with_its_follow_up() {
    let outcome = flood("ok").await;
    let Outcome::Completed { follow_ups } = outcome else {
        panic!("a job within its budget completes, got {outcome:?}");
    };
    let job_types: Vec<&str> = follow_ups.iter().map(|f| f.job_type.as_str()).collect();
    assert_eq!(job_types, ["hostcalls.Next"]);
}

#[tokio::test]
async fn a_handler_error_message_of_megabytes_is_bounded_to_a_reason() {
    let outcome = flood("error").await;
    let Outcome::Failed(JobError::Retryable(message)) = outcome else {
        panic!("the handler's retryable error arrives, got {outcome:?}");
    };
    assert!(
        message.len() <= REASON_MAX + MARKER_MAX,
        "a 4 MiB message is cut to a reason: {} bytes",
        message.len()
    );
    assert!(
        message.ends_with(" … (4194304 bytes in all)"),
        "the cut says how long the message was"
    );
}
