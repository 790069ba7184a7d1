//! Every kind of [`Outcome`] observed from real components.

use std::time::{Duration, Instant};

use jobhost::job::{Invocation, Outcome};
use jobhost_sdk::JobError;

use crate::support::plugin::{MEMORY_LIMIT, PROMPTLY, invocation, load};

const SEND_EMAIL: &str = "scripted.SendEmail";

#[tokio::test]
async fn a_handler_that_returns_ok_completes_without_follow_ups() {
    let plugin = load("scripted").await;
    let outcome = plugin
        .invoke(invocation(SEND_EMAIL, br#"{"key": "ok"}"#))
        .await;
    assert!(
        matches!(&outcome, Outcome::Completed { follow_ups } if follow_ups.is_empty()),
        "a succeeding handler completes: {outcome:?}"
    );
}

#[tokio::test]
async fn handler_errors_arrive_as_the_handler_returned_them() {
    let plugin = load("scripted").await;
    let cases: [(&[u8], JobError); 3] = [
        (
            br#"{"key": "r", "fail_times": 1, "message": "service is down"}"#,
            JobError::retryable("service is down"),
        ),
        (
            br#"{"key": "f", "fail_times": 1, "failure": "fatal", "message": "bad address"}"#,
            JobError::fatal("bad address"),
        ),
        (
            br#"{"key": "d", "defer_times": 1, "defer_ms": 1500}"#,
            JobError::deferred_because(Duration::from_millis(1500), "deferred by script"),
        ),
    ];
    for (payload, expected) in cases {
        let outcome = plugin.invoke(invocation(SEND_EMAIL, payload)).await;
        assert!(
            matches!(&outcome, Outcome::Failed(error) if *error == expected),
            "the handler's `{expected}` reaches the host unchanged, got {outcome:?}"
        );
    }
}

#[tokio::test]
async fn a_payload_the_guest_cannot_decode_is_undecodable_with_the_serde_message() {
    let plugin = load("scripted").await;
    let outcome = plugin
        .invoke(invocation(SEND_EMAIL, br#"{"fail_times": "often"}"#))
        .await;
    let Outcome::Undecodable(message) = outcome else {
        panic!("a payload of the wrong shape is undecodable, got {outcome:?}");
    };
    assert!(
        message.contains("invalid type"),
        "the serde message is kept: {message}"
    );
}

#[tokio::test]
async fn a_guest_panic_crashes_with_the_panic_message() {
    let plugin = load("panic").await;
    let outcome = plugin.invoke(invocation("panic.Panic", b"{}")).await;
    let Outcome::Crashed(message) = outcome else {
        panic!("a panicking handler crashes, got {outcome:?}");
    };
    assert!(
        message.starts_with("boom: the handler panicked on purpose"),
        "the guest's panic message, not a bare trap: {message}"
    );
}

/// On a single-threaded runtime, so the no-op job can only run if the spinning guest
/// yields; spawned, so the invocation future is known to be `Send`.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_guest_is_stopped_at_its_timeout_while_other_jobs_run() {
    let (spin, noop) = (load("spin").await, load("noop").await);
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let spinning = tokio::spawn(async move {
        let job = Invocation {
            timeout,
            ..invocation("spin.Spin", b"{}")
        };
        spin.invoke(job).await
    });
    // Let the spinning guest start first.
    tokio::task::yield_now().await;

    let nooped = noop.invoke(invocation("noop.Noop", b"{}")).await;
    let noop_took = started.elapsed();
    assert!(
        matches!(nooped, Outcome::Completed { .. }),
        "the no-op job completes: {nooped:?}"
    );
    assert!(
        !spinning.is_finished(),
        "the no-op job ran while the guest was spinning"
    );
    assert!(
        noop_took < timeout,
        "the no-op job is not starved by the spinning one: took {noop_took:?}"
    );

    let spun = spinning
        .await
        .expect("the spinning job's task does not panic");
    let spin_took = started.elapsed();
    let Outcome::Crashed(message) = spun else {
        panic!("a spinning guest crashes, got {spun:?}")
    };
    assert_eq!(message, "job timed out after 2s");
    assert!(
        spin_took >= timeout && spin_took < timeout + PROMPTLY,
        "the spinning guest is stopped at its timeout: took {spin_took:?}"
    );
}

#[tokio::test]
async fn a_memory_bomb_hits_the_memory_cap() {
    let plugin = load("membomb").await;
    let outcome = plugin.invoke(invocation("membomb.Allocate", b"{}")).await;
    let Outcome::Crashed(message) = outcome else {
        panic!("a memory bomb crashes, got {outcome:?}");
    };
    assert_eq!(
        message,
        format!("memory limit of {} MiB exceeded", MEMORY_LIMIT >> 20)
    );
}

/// Which trap ends it depends on the guest's frames: Rust keeps address-taken locals on a
/// shadow stack in linear memory, which may run out before wasm's own call stack does.
#[tokio::test]
async fn unbounded_recursion_crashes_with_a_stack_trap() {
    let plugin = load("recursion").await;
    let outcome = plugin.invoke(invocation("recursion.Recurse", b"{}")).await;
    let Outcome::Crashed(message) = outcome else {
        panic!("unbounded recursion crashes, got {outcome:?}");
    };
    assert!(
        [
            "wasm trap: call stack exhausted",
            "wasm trap: out of bounds memory access"
        ]
        .contains(&message.as_str()),
        "the trap's own message: {message}"
    );
}

#[tokio::test]
async fn follow_ups_a_handler_enqueues_are_returned_with_the_completion() {
    let plugin = load("thumbnailer").await;
    let payload = br#"{"name": "dot", "width": 2, "height": 2,
        "pixels": [[255, 255, 255], [0, 0, 0], [0, 0, 0], [255, 255, 255]]}"#;
    let outcome = plugin
        .invoke(invocation("thumbnail.MakeThumbnail", payload))
        .await;
    let Outcome::Completed { follow_ups } = outcome else {
        panic!("the thumbnail job completes, got {outcome:?}");
    };
    let [follow_up] = follow_ups.as_slice() else {
        panic!("exactly one follow-up is enqueued: {follow_ups:?}");
    };
    assert_eq!(follow_up.job_type, "thumbnail.PublishThumbnail");
    assert_eq!(follow_up.delay, None);
    let payload: serde_json::Value =
        serde_json::from_str(follow_up.payload.get()).expect("the follow-up payload is JSON");
    assert_eq!(payload["name"], "dot");
    assert_eq!(
        (payload["width"].as_u64(), payload["height"].as_u64()),
        (Some(1), Some(1))
    );
}
