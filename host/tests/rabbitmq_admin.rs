//! The operator's dead-letter helpers: list, replay, purge (all, or one job's), and the
//! depths the dashboard shows.

mod support;

use std::time::Duration;

use jobhost::broker::{Backend, DeadLetterOut, QueueDepth, Replayed};
use jobhost::envelope::Envelope;
use jobhost::policy::Granularity;
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

/// An envelope of a job on `queue`.
fn job(queue: &str) -> Envelope {
    let payload = RawValue::from_string("{}".to_owned()).expect("valid json");
    Envelope::new("tests::Job", queue, payload)
}

#[tokio::test]
async fn a_depth_counts_ready_held_and_dead_messages_and_one_letter_is_replayed_or_purged_by_job_id()
 {
    let Some(backend) = backend(&unique("depth")).await else {
        return;
    };
    let name = unique("depth");
    let _cleanup = Cleanup::new(&[&name]);
    backend
        .declare(&QueueConfig::new(&name))
        .await
        .expect("declared");
    let depth = |ready, held, dead| QueueDepth { ready, held, dead };
    let read = || async {
        within(PATIENCE, "a depth", backend.depth(&name))
            .await
            .expect("read")
    };
    assert_eq!(read().await, depth(0, 0, 0), "a fresh queue is empty");

    backend.publish(&job(&name), None).await.expect("published");
    let granularity = Granularity::default();
    for secs in [30, 60, 60] {
        let delay = granularity.round(Duration::from_secs(secs)).expect("fits");
        backend
            .publish(&job(&name), Some(delay))
            .await
            .expect("held");
    }
    let letters = [job(&name), job(&name), job(&name)];
    for letter in &letters {
        let body = letter.encode();
        let out = DeadLetterOut {
            queue: &name,
            body: &body,
            reason: "fatal error: no",
            attempts: 1,
            trace: None,
        };
        backend.dead_letter(out).await.expect("dead-lettered");
    }
    assert_eq!(
        read().await,
        depth(1, 3, 3),
        "two hold queues, three letters"
    );

    let replayed = backend.take_dead_letter(&name, letters[1].job_id, true);
    assert!(
        within(PATIENCE, "a replay", replayed)
            .await
            .expect("replayed")
    );
    let purged = backend.take_dead_letter(&name, letters[0].job_id, false);
    assert!(within(PATIENCE, "a purge", purged).await.expect("purged"));
    let gone = backend.take_dead_letter(&name, letters[0].job_id, false);
    assert!(
        !within(PATIENCE, "a second purge", gone)
            .await
            .expect("looked"),
        "it is gone"
    );

    let left = within(PATIENCE, "listing", backend.dead_letters(&name, 10))
        .await
        .expect("listed");
    assert_eq!(left.len(), 1, "the third letter stays");
    assert_eq!(left[0].body, letters[2].encode());
    assert_eq!(
        read().await,
        depth(2, 3, 1),
        "the replayed job is ready again"
    );
}
