//! Bad input published raw onto the work queue of a running host process: each kind is
//! dead-lettered on `test.ledger.work.dead` with its own `x-death-reason`, odd headers on a
//! good body are served (the body is the source of truth), and the good jobs between them
//! all complete.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

use crate::support::faults::ledger::{self, Ledger, LedgerQueues};
use crate::support::faults::table::Row;

/// The host's `WorkerConfig::max_payload_bytes` default; `jobhost run` has no flag for it.
const MAX_PAYLOAD_BYTES: usize = 8 * 1024 * 1024;
/// A header value well above anything a client sends, below the 128 KiB frame limit a
/// message's header frame must fit.
const HUGE_HEADER_BYTES: usize = 64 * 1024;

/// What must become of a case.
enum Expect {
    /// Dead-lettered with a reason that starts with this.
    Dead(String),
    /// Completed, recorded under this ledger id.
    Completed(u64),
}

struct Case {
    name: &'static str,
    body: Vec<u8>,
    properties: BasicProperties,
    expect: Expect,
}

fn json_properties() -> BasicProperties {
    BasicProperties::default().with_content_type("application/json".into())
}

fn headers(entries: &[(&str, AMQPValue)]) -> BasicProperties {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert((*key).into(), value.clone());
    }
    json_properties().with_headers(table)
}

/// A raw envelope on the work queue `queue`, for bodies the host's `Envelope` cannot express.
fn raw_envelope(queue: &str, job_type: &str, payload: &str) -> Vec<u8> {
    format!(
        r#"{{"job_id":"6f1c1f0e-8d5e-4a36-9a55-0d3f3f0c2b71","job_type":"{job_type}","queue":"{queue}","attempt":1,"enqueued_at_ms":0,"payload":{payload}}}"#
    )
    .into_bytes()
}

fn cases(queues: &LedgerQueues, ids: &mut impl Iterator<Item = u64>) -> Vec<Case> {
    let oversized = format!(
        r#"{{"id":0,"pad":"{}"}}"#,
        "x".repeat(MAX_PAYLOAD_BYTES + 1)
    );
    let mut good = |name, properties| {
        let id = ids.next().expect("enough ids");
        Case {
            name,
            body: queues.work(id, 0).encode(),
            properties,
            expect: Expect::Completed(id),
        }
    };
    let odd = vec![
        good(
            "x-attempt as a string",
            headers(&[("x-attempt", AMQPValue::LongString("seven".into()))]),
        ),
        good(
            "x-attempt contradicting the body",
            headers(&[("x-attempt", AMQPValue::LongUInt(999))]),
        ),
        good("no content type, no headers", BasicProperties::default()),
        good(
            "a huge header",
            headers(&[(
                "x-padding",
                AMQPValue::LongString(LongString::from("h".repeat(HUGE_HEADER_BYTES))),
            )]),
        ),
    ];
    let dead = |name, body: Vec<u8>, reason: String| Case {
        name,
        body,
        properties: json_properties(),
        expect: Expect::Dead(reason),
    };
    let mut all = vec![
        dead(
            "non-JSON body",
            b"\xff\xfe definitely not json".to_vec(),
            "malformed envelope".into(),
        ),
        dead(
            "JSON missing the envelope's fields",
            br#"{"job_type":"ledger.Work"}"#.to_vec(),
            "malformed envelope".into(),
        ),
        dead(
            "unknown job type",
            raw_envelope(queues.work, "nobody.Serves", r#"{"id":1}"#),
            "no handler for job type `nobody.Serves`".into(),
        ),
        dead(
            "payload that does not fit the job",
            raw_envelope(queues.work, "ledger.Work", r#"{"id":"one"}"#),
            "decode error: invalid type: string \"one\", expected u64".into(),
        ),
        dead(
            "oversized payload",
            raw_envelope(queues.work, "ledger.Work", &oversized),
            format!(
                "payload too large: {} bytes, the limit is {MAX_PAYLOAD_BYTES} bytes",
                oversized.len()
            ),
        ),
    ];
    all.extend(odd);
    all
}

async fn publish(channel: &Channel, queue: &str, body: &[u8], properties: BasicProperties) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("basic.publish")
        .await
        .expect("the broker confirms a raw message");
}

pub(crate) async fn run(ledger: &mut Ledger, good_jobs: usize) -> Row {
    let queues = ledger.queues().clone();
    let channel = queues.raw_channel().await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms on the raw channel");
    let good_ids = ledger::fresh_ids(good_jobs);
    let mut case_ids = ledger::fresh_ids(8).into_iter();
    let cases = cases(&queues, &mut case_ids);
    let between = good_jobs / cases.len();
    let mut good = good_ids.iter();
    for case in &cases {
        publish(&channel, queues.work, &case.body, case.properties.clone()).await;
        for &id in good.by_ref().take(between) {
            publish(
                &channel,
                queues.work,
                &queues.work(id, 0).encode(),
                json_properties(),
            )
            .await;
        }
    }
    for &id in good {
        publish(
            &channel,
            queues.work,
            &queues.work(id, 0).encode(),
            json_properties(),
        )
        .await;
    }

    let mut completed_ids = good_ids.clone();
    completed_ids.extend(cases.iter().filter_map(|case| match case.expect {
        Expect::Completed(id) => Some(id),
        Expect::Dead(_) => None,
    }));
    ledger
        .wait_for_all(
            &completed_ids,
            Duration::from_secs(120),
            "the good jobs around the bad input",
        )
        .await;
    let expected_dead = cases
        .iter()
        .filter(|case| matches!(case.expect, Expect::Dead(_)))
        .count();
    let dead = ledger
        .wait_for_dead(expected_dead, Duration::from_secs(60))
        .await;
    for case in &cases {
        let Expect::Dead(reason) = &case.expect else {
            continue;
        };
        let letters: Vec<_> = dead.iter().filter(|l| l.body == case.body).collect();
        assert_eq!(
            letters.len(),
            1,
            "the {} is dead-lettered once, with its body unchanged",
            case.name
        );
        assert!(
            letters[0].reason.starts_with(reason.as_str()),
            "the {} is dead-lettered as `{reason}`, not `{}`",
            case.name,
            letters[0].reason
        );
    }
    assert_eq!(
        dead.len(),
        expected_dead,
        "only the bad input is dead-lettered"
    );
    let row = ledger.row("b: bad input on the work queue", &completed_ids, &dead);
    assert_eq!(row.duplicated, 0, "without a kill no job completes twice");
    row
}
