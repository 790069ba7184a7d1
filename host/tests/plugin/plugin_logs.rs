//! Guest output reaches the host's `tracing`, tagged with the job, and within a budget.
//!
//! Each test installs a capturing subscriber as the thread's default and runs on a
//! single-threaded runtime, so the guest runs on the thread the subscriber watches.

use jobhost::job::{Invocation, Outcome};
use jobhost::plugin::Plugin;

use crate::support::capture::Captured;
use crate::support::plugin::{invocation, load};

async fn run(plugin: &Plugin, job: Invocation<'_>) -> Outcome {
    let outcome = plugin.invoke(job).await;
    assert!(
        matches!(outcome, Outcome::Completed { .. }),
        "the job completes: {outcome:?}"
    );
    outcome
}

#[tokio::test(flavor = "current_thread")]
async fn guest_log_calls_carry_the_job_fields_and_the_guest_fields() {
    let plugin = load("scripted").await;
    let (captured, _guard) = Captured::install();
    let job = Invocation {
        attempt: 2,
        ..invocation("scripted.SendEmail", br#"{"key": "traced"}"#)
    };
    run(&plugin, job).await;

    let events = captured.guest_events();
    let event = events
        .iter()
        .find(|event| event["fields"]["message"] == "scripted call")
        .unwrap_or_else(|| panic!("the guest's log call is captured: {events:#?}"));
    assert_eq!(event["level"], "INFO");
    let fields = &event["fields"];
    assert_eq!(fields["plugin"], "scripted");
    assert_eq!(fields["job_type"], "scripted.SendEmail");
    assert_eq!(fields["job_id"], job.job_id.to_string());
    assert_eq!(fields["attempt"], 2);
    assert_eq!(fields["source"], "log");
    let guest_fields = fields["fields"]
        .as_str()
        .expect("the guest's fields are rendered");
    assert!(
        guest_fields.contains(r#"key="traced""#),
        "the guest's own fields: {guest_fields}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn stdout_and_stderr_lines_are_logged_and_a_flood_is_cut_at_the_budget() {
    let plugin = load("logspam").await;
    let (captured, _guard) = Captured::install();
    let job = invocation("logspam.Spam", br#"{"lines": 2000}"#);
    run(&plugin, job).await;

    let events = captured.guest_events();
    let sourced = |source: &str, message: &str| {
        events.iter().any(|event| {
            event["fields"]["source"] == source && event["fields"]["message"] == message
        })
    };
    assert!(
        sourced("stdout", "stdout line 0"),
        "stdout lines are logged, one event per line"
    );
    assert!(
        sourced("stderr", "stderr line 0"),
        "stderr lines are logged, one event per line"
    );
    assert!(
        events
            .iter()
            .all(|event| event["fields"]["job_id"] == job.job_id.to_string()),
        "every line carries the job id"
    );
    let truncation = events
        .iter()
        .find(|event| event["fields"]["source"] == "host")
        .expect("the truncation is reported once");
    let note = truncation["fields"]["message"].as_str().expect("a message");
    assert!(note.starts_with("guest log output truncated:"), "{note}");
    assert!(
        events.len() < 10_000,
        "the budget bounds the events of one job: {}",
        events.len()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn guest_words_reach_the_log_escaped_onto_one_line() {
    let plugin = load("hostcalls").await;
    let (captured, _guard) = Captured::install();
    run(&plugin, invocation("hostcalls.Flood", br#""ok""#)).await;

    let events = captured.guest_events();
    let event = events
        .iter()
        .find(|event| event["fields"]["source"] == "log")
        .unwrap_or_else(|| panic!("the guest's log call is captured: {events:#?}"));
    let fields = &event["fields"];
    assert_eq!(
        fields["message"], r"one\nline",
        "a newline in a message is escaped, not a second line"
    );
    let guest_fields = fields["fields"].as_str().expect("the guest's fields");
    assert!(
        !guest_fields.chars().any(char::is_control) && guest_fields.contains("u{1b}"),
        "an ESC in a field value is escaped: {guest_fields}"
    );
}
