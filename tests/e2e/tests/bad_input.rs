//! Bad input on a work queue: each kind is dead-lettered with its own reason, byte for
//! byte, and the worker goes on serving the good jobs around it.

use jobhost::testing::{Harness, load_plugin};
use jobhost::worker::WorkerConfig;
use serde_json::json;

const QUEUE: &str = "test.bare";

#[tokio::test(start_paused = true)]
async fn every_kind_of_bad_input_is_dead_lettered_with_its_own_reason_and_good_jobs_still_run() {
    let engine = jobhost_e2e::engine(env!("CARGO_TARGET_TMPDIR"));
    let unit = load_plugin(&engine, &jobhost_fixtures::wasm("scripted")).await;
    let config = WorkerConfig {
        max_payload_bytes: 4096,
        ..WorkerConfig::default()
    };
    let h = Harness::start([unit], config).await;
    let envelope = |job_type: &str, payload: &str| {
        format!(
            r#"{{"job_id":"6f1c1f0e-8d5e-4a36-9a55-0d3f3f0c2b71","job_type":"{job_type}","queue":"{QUEUE}","attempt":1,"enqueued_at_ms":0,"payload":{payload}}}"#
        )
    };
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "not JSON",
            b"\xff\xfe definitely not json".to_vec(),
            "malformed envelope".into(),
        ),
        (
            "JSON without the envelope's fields",
            br#"{"hello":"world"}"#.to_vec(),
            "malformed envelope".into(),
        ),
        ("an empty body", Vec::new(), "malformed envelope".into()),
        (
            "an unknown job type",
            envelope("nobody.Serves", r#"{"key":"x"}"#).into_bytes(),
            "no handler for job type `nobody.Serves`".into(),
        ),
        (
            "a payload that does not fit the job",
            envelope("scripted.BareJob", r#"{"key":42}"#).into_bytes(),
            "decode error: invalid type: integer `42`, expected a string at line 1 column 9".into(),
        ),
        (
            "an oversized payload",
            envelope(
                "scripted.BareJob",
                &format!(r#"{{"key":"{}"}}"#, "x".repeat(5000)),
            )
            .into_bytes(),
            "payload too large: 5010 bytes, the limit is 4096 bytes".into(),
        ),
    ];
    for (_, body, _) in &cases {
        h.publish_raw(QUEUE, body);
        h.enqueue("scripted.BareJob", json!({"key": "good"})).await;
    }
    h.run_until_idle().await;

    let dead = h.backend.dead_letters(QUEUE);
    let reasons: Vec<&str> = dead.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(
        dead.len(),
        cases.len(),
        "one dead letter per bad message: {reasons:?}"
    );
    for (what, body, reason) in &cases {
        let letter = dead
            .iter()
            .find(|d| &d.body == body)
            .unwrap_or_else(|| panic!("{what}: not dead-lettered"));
        assert_eq!(&letter.reason, reason, "{what}");
    }
    assert_eq!(
        h.log.attempts_of("good"),
        vec![1; cases.len()],
        "every good job ran once"
    );
    h.shutdown().await;
}
