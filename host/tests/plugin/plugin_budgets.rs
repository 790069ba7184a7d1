//! A guest that floods the host imports costs one attempt, named after the budget it
//! overran, and the worker serves on; the host's memory under floods is measured in
//! `plugin_flood_memory.rs`.

use jobhost::job::Outcome;
use jobhost::testing::{Harness, load_plugin};
use jobhost::text::{MARKER_MAX, REASON_MAX};
use jobhost::worker::WorkerConfig;
use jobhost_sdk::JobError;
use serde_json::json;

use crate::support::plugin::floods::{FLOODS, HTTP_FLOODS, flood, http_flood};
use crate::support::plugin::{fixture, shared_engine};

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
async fn each_wasi_http_flood_costs_one_attempt_with_a_reason_naming_its_budget() {
    for (mode, expected) in HTTP_FLOODS {
        let outcome = http_flood(mode).await;
        let Outcome::Crashed(reason) = outcome else {
            panic!("wasi:http flood `{mode}` crashes the attempt, got {outcome:?}");
        };
        assert!(
            reason.starts_with(expected),
            "wasi:http flood `{mode}`: the reason names the budget: {reason}"
        );
    }
}

#[tokio::test]
async fn a_request_of_ordinary_parts_is_within_the_wasi_http_budget() {
    let outcome = http_flood("ok").await;
    assert!(
        matches!(outcome, Outcome::Completed { .. }),
        "ordinary headers, parts and a small body are within the budget: {outcome:?}"
    );
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

#[tokio::test(start_paused = true)]
async fn a_wasi_http_flood_is_dead_lettered_after_one_attempt_and_the_worker_serves_on() {
    let engine = shared_engine();
    let units = [
        load_plugin(&engine, &fixture("httpflood")).await,
        load_plugin(&engine, &fixture("noop")).await,
    ];
    let h = Harness::start(units, WorkerConfig::default()).await;
    h.enqueue("httpflood.Flood", json!({"mode": "resources"}))
        .await;
    h.enqueue("noop.Noop", json!({})).await;
    h.run_until_idle().await;

    let reasons = h.dead_letter_reasons("test.httpflood");
    assert_eq!(reasons.len(), 1, "the flood is dead-lettered: {reasons:?}");
    assert!(
        reasons[0].contains("after attempt 1")
            && reasons[0].ends_with("more than 1024 resources held at once"),
        "one attempt, and the reason names the budget: {}",
        reasons[0]
    );
    assert!(
        h.dead_letter_reasons("test.noop").is_empty(),
        "the next job is served"
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_flood_is_dead_lettered_after_one_attempt_and_the_worker_serves_on() {
    let engine = shared_engine();
    let units = [
        load_plugin(&engine, &fixture("hostcalls")).await,
        load_plugin(&engine, &fixture("noop")).await,
    ];
    let h = Harness::start(units, WorkerConfig::default()).await;
    h.enqueue("hostcalls.Flood", json!("follow-ups")).await;
    h.enqueue("noop.Noop", json!({})).await;
    h.run_until_idle().await;

    let reasons = h.dead_letter_reasons("test.hostcalls");
    assert_eq!(reasons.len(), 1, "the flood is dead-lettered: {reasons:?}");
    assert!(
        reasons[0].contains("after attempt 1")
            && reasons[0].ends_with("more than 1000 follow-ups in one job"),
        "one attempt, and the reason names the budget: {}",
        reasons[0]
    );
    assert!(
        h.dead_letter_reasons("test.noop").is_empty(),
        "the next job is served"
    );
    assert_eq!(h.log.calls().len(), 2, "one attempt each");
    h.shutdown().await;
}
