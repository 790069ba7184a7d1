//! The operator's dead-letter helpers: list, replay, purge (all, or one job's), and the
//! depths the dashboard shows; listings bounded in bytes and leaving letters as they were,
//! also through the real `jobhost run` binary.

use std::time::Duration;

use jobhost::broker::{
    Backend, DeadLetterList, DeadLetterOut, DeadLetters, EXCERPT_MAX, LISTING_MAX_BYTES,
    QueueDepth, Replayed,
};
use jobhost::envelope::Envelope;
use jobhost::policy::Granularity;
use jobhost::text::MARKER_MAX;
use jobhost_sdk::QueueConfig;
use lapin::Channel;
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::value::RawValue;

use crate::support::cli::{Host, STARTUP, jobhost, json_of, stdout_of};
use crate::support::{
    Cleanup, PATIENCE, amqp_url, backend, publish_with_headers, raw_channel, ready, take, unique,
    within,
};

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

    let listed = within(PATIENCE, "listing", backend.list_dead(&name, 10))
        .await
        .expect("listed");
    let summary: Vec<_> = listed
        .letters
        .iter()
        .map(|l| (l.job_id, l.body.as_str(), l.reason.as_deref(), l.attempts))
        .collect();
    let text = String::from_utf8(encoded.clone()).expect("JSON is UTF-8");
    assert_eq!(
        summary,
        [
            (
                Some(job.job_id),
                text.as_str(),
                Some("max attempts (3) exhausted"),
                Some(3)
            ),
            (None, "garbage", Some("malformed envelope"), Some(0)),
        ]
    );
    assert!(
        listed
            .letters
            .iter()
            .all(|l| l.headers.get("x-original-queue") == Some(&name))
    );
    let channel = raw_channel().await;
    assert_eq!(
        ready(&channel, &dead).await,
        2,
        "listing leaves the letters in place"
    );

    let replayed = within(PATIENCE, "replay", backend.replay_dead(&name))
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

    let purged = within(PATIENCE, "purge", backend.purge_dead(&name))
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

    let replayed = backend.take_dead(&name, letters[1].job_id, true);
    assert!(
        within(PATIENCE, "a replay", replayed)
            .await
            .expect("replayed")
    );
    let purged = backend.take_dead(&name, letters[0].job_id, false);
    assert!(within(PATIENCE, "a purge", purged).await.expect("purged"));
    let gone = backend.take_dead(&name, letters[0].job_id, false);
    assert!(
        !within(PATIENCE, "a second purge", gone)
            .await
            .expect("looked"),
        "it is gone"
    );

    let left = within(PATIENCE, "listing", backend.list_dead(&name, 10))
        .await
        .expect("listed");
    assert_eq!(left.letters.len(), 1, "the third letter stays");
    assert_eq!(left.letters[0].job_id, Some(letters[2].job_id));
    assert_eq!(
        read().await,
        depth(2, 3, 1),
        "the replayed job is ready again"
    );
}

/// A channel whose publishes return once the broker has them.
async fn confirming_channel() -> Channel {
    let channel = raw_channel().await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    channel
}

fn long(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text))
}

/// Letters dead-lettered by a plain AMQP producer into a quorum queue with a delivery limit
/// of 1: a listing that requeued what it read would mark them redelivered, and the broker
/// would drop each at its second listing, as RabbitMQ 4 does at the 21st by default.
#[tokio::test]
async fn listings_leave_dead_letters_as_they_were_in_order_under_a_quorum_delivery_limit() {
    let Some(backend) = backend(&unique("listing")).await else {
        return;
    };
    let name = unique("listing");
    let dead = format!("{name}.dead");
    let _cleanup = Cleanup::new(&[&name]);
    let channel = confirming_channel().await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), long("quorum"));
    arguments.insert("x-delivery-limit".into(), AMQPValue::LongInt(1));
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(dead.as_str().into(), durable, arguments)
        .await
        .expect("a quorum dead-letter queue");
    for i in 0..3 {
        let mut headers = FieldTable::default();
        headers.insert("x-death-reason".into(), long(&format!("reason {i}")));
        headers.insert("producer-header".into(), long("theirs"));
        publish_with_headers(&channel, &dead, format!("letter {i}").as_bytes(), headers).await;
    }

    for _ in 0..5 {
        let listed = within(PATIENCE, "a listing", backend.list_dead(&name, 10))
            .await
            .expect("listed");
        let shown: Vec<_> = listed
            .letters
            .iter()
            .map(|l| (l.body.as_str(), l.reason.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                ("letter 0", Some("reason 0")),
                ("letter 1", Some("reason 1")),
                ("letter 2", Some("reason 2"))
            ],
            "each listing shows every letter, oldest first"
        );
    }

    for i in 0..3 {
        let letter = take(&channel, &dead)
            .await
            .expect("the letter is still there");
        assert_eq!(letter.data, format!("letter {i}").as_bytes(), "in order");
        assert!(!letter.redelivered, "never requeued");
        let headers = letter.properties.headers().clone().unwrap_or_default();
        assert_eq!(
            headers.inner().get("producer-header"),
            Some(&long("theirs")),
            "with the producer's headers"
        );
        assert_eq!(
            letter
                .properties
                .content_type()
                .as_ref()
                .map(|t| t.as_str()),
            Some("application/json"),
            "and properties"
        );
    }
    assert!(take(&channel, &dead).await.is_none(), "and nothing more");
}

/// A queue of the `thumbnailer` fixture, which no other broker test loads.
const IMAGES: &str = "examples.images";
const THUMBNAILS: &str = "examples.thumbnails";
const LARGE_LETTERS: usize = 40;
const LARGE_PAYLOAD: usize = 2 * 1000 * 1000;

/// The host's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// `jobhost dead ARGS` against `host`, blocking only this test's thread.
async fn dead(host: &Host, args: &[&str]) -> std::process::Output {
    let mut all = vec!["dead"];
    all.extend_from_slice(args);
    tokio::task::block_in_place(|| host.cli(&all))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_host_lists_large_dead_letters_as_excerpts_under_the_cap_and_keeps_them() {
    if backend(&unique("excerpts")).await.is_none() {
        return;
    }
    let _cleanup = Cleanup::new(&[IMAGES, THUMBNAILS]);
    let dir = tempfile::tempdir().expect("a plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("thumbnailer"),
        dir.path().join("thumbnailer.wasm"),
    )
    .expect("the fixture copies");
    let mut command = jobhost();
    command
        .args(["run", "--amqp", &amqp_url(), "--plugins"])
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    host.wait_for_line(STARTUP, |l| {
        l.contains("consuming") && l.contains(&format!("queue={IMAGES} "))
    });
    let dead_queue = format!("{IMAGES}.dead");
    let channel = confirming_channel().await;
    channel
        .queue_purge(dead_queue.as_str().into(), QueuePurgeOptions::default())
        .await
        .expect("no leftovers");
    let mut jobs = Vec::new();
    for i in 0..LARGE_LETTERS {
        let payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(LARGE_PAYLOAD));
        let job = Envelope::new(
            "thumbnail.MakeThumbnail",
            IMAGES,
            RawValue::from_string(payload).expect("JSON"),
        );
        let mut headers = FieldTable::default();
        headers.insert("x-death-reason".into(), long("fatal error: too large"));
        headers.insert("x-attempts".into(), AMQPValue::LongUInt(1));
        headers.insert("letter".into(), long(&i.to_string()));
        publish_with_headers(&channel, &dead_queue, &job.encode(), headers).await;
        jobs.push(job);
    }
    let body_bytes = jobs[0].encode().len() as u64;

    let before = rss_kib(host.pid());
    let listed: DeadLetterList =
        serde_json::from_value(json_of(&dead(&host, &["list", IMAGES, "--json"]).await))
            .expect("a listing");
    let after = rss_kib(host.pid());
    let answer = serde_json::to_vec(&listed).expect("serializes").len();
    eprintln!(
        "listing {LARGE_LETTERS} dead letters of {body_bytes} bytes: host VmRSS {before} KiB -> \
         {after} KiB ({:+} KiB), answer {answer} bytes",
        after as i64 - before as i64
    );
    assert!(answer <= LISTING_MAX_BYTES, "{answer} bytes");
    assert_eq!(
        (listed.letters.len(), listed.present, listed.left_out),
        (LARGE_LETTERS, LARGE_LETTERS as u64, 0)
    );
    for (i, (letter, job)) in listed.letters.iter().zip(&jobs).enumerate() {
        assert_eq!(letter.job_id, Some(job.job_id), "oldest first");
        assert_eq!(letter.headers.get("letter"), Some(&i.to_string()));
        assert_eq!(letter.reason.as_deref(), Some("fatal error: too large"));
        assert!(letter.body_cut && letter.body_bytes == body_bytes);
        assert!(letter.body.len() <= EXCERPT_MAX + MARKER_MAX, "an excerpt");
    }
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "the host held at most a few bodies at once: {before} KiB -> {after} KiB"
    );

    for (i, job) in jobs.iter().enumerate() {
        let letter = take(&channel, &dead_queue)
            .await
            .expect("every letter is still there");
        assert!(!letter.redelivered, "never requeued");
        assert_eq!(
            Envelope::decode(&letter.data).map(|e| e.job_id).ok(),
            Some(job.job_id),
            "whole and in order"
        );
        let headers = letter.properties.headers().clone().unwrap_or_default();
        assert_eq!(headers.inner().get("letter"), Some(&long(&i.to_string())));
    }

    let refused = dead(&host, &["list", "jobhost-test.elsewhere"]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("not a queue of a loaded plugin"),
        "a queue no loaded plugin declares is refused: {stderr}"
    );
    for action in ["replay", "purge"] {
        let refused = dead(&host, &[action, "jobhost-test.elsewhere"]).await;
        assert!(!refused.status.success(), "`{action}` is refused too");
    }

    for body in [b"not an envelope".as_slice(), b"nor this"] {
        publish_with_headers(&channel, &dead_queue, body, FieldTable::default()).await;
    }
    let replayed = stdout_of(&dead(&host, &["replay", IMAGES]).await);
    assert!(
        replayed.contains("replayed 0") && replayed.contains("2 that are not jobs stay dead"),
        "{replayed}"
    );
    let purged = stdout_of(&dead(&host, &["purge", IMAGES]).await);
    assert!(purged.contains("purged 2"), "{purged}");
}
