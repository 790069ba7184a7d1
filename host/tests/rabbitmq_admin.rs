//! The operator's dead-letter helpers: list, replay, purge.

mod support;

use jobhost::broker::{Backend, DeadLetterOut, Replayed};
use jobhost::envelope::Envelope;
use jobhost_sdk::QueueConfig;
use serde_json::value::RawValue;
use support::{Cleanup, PATIENCE, backend, raw_channel, ready, take, unique, within};

#[tokio::test]
async fn dead_letters_are_listed_in_place_replayed_as_first_attempts_and_purged() {
    let Some(backend) = backend(&unique("admin")).await else {
        return;
    };
    let name = unique("admin");
    let dead = format!("{name}.dead");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");
    let payload = RawValue::from_string("{}".to_owned()).expect("valid json");
    let job = Envelope {
        attempt: 3,
        ..Envelope::new("tests::Job", &name, payload)
    };
    let encoded = job.encode();
    let letters = [
        (encoded.as_slice(), "max attempts (3) exhausted", 3),
        (b"garbage".as_slice(), "malformed envelope", 0),
    ];
    for (body, reason, attempts) in letters {
        let letter = DeadLetterOut {
            queue: &name,
            body,
            reason,
            attempts,
            trace: None,
        };
        backend.dead_letter(letter).await.expect("dead-lettered");
    }

    let listed = within(PATIENCE, "listing", backend.dead_letters(&name, 10))
        .await
        .expect("listed");
    let summary: Vec<_> = listed
        .iter()
        .map(|l| (l.body.as_slice(), l.reason.as_deref(), l.attempts))
        .collect();
    assert_eq!(
        summary,
        [
            (
                encoded.as_slice(),
                Some("max attempts (3) exhausted"),
                Some(3)
            ),
            (b"garbage".as_slice(), Some("malformed envelope"), Some(0)),
        ]
    );
    assert!(
        listed
            .iter()
            .all(|l| l.original_queue.as_deref() == Some(name.as_str()))
    );
    let channel = raw_channel().await;
    assert_eq!(
        ready(&channel, &dead).await,
        2,
        "listing leaves the letters in place"
    );

    let replayed = within(PATIENCE, "replay", backend.replay_dead_letters(&name))
        .await
        .expect("replayed");
    assert_eq!(
        replayed,
        Replayed {
            replayed: 1,
            skipped: 1
        }
    );
    let back = take(&channel, &name)
        .await
        .expect("the envelope is back on the work queue");
    let back = Envelope::decode(&back.data).expect("an envelope");
    assert_eq!(
        (back.job_id, back.attempt),
        (job.job_id, 1),
        "same job, first attempt"
    );
    assert_eq!(
        ready(&channel, &dead).await,
        1,
        "the malformed letter stays"
    );

    let purged = within(PATIENCE, "purge", backend.purge_dead_letters(&name))
        .await
        .expect("purged");
    assert_eq!(purged, 1);
    assert_eq!(
        ready(&channel, &dead).await,
        0,
        "the dead-letter queue is empty"
    );
}
