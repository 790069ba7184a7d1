//! What an operator does with dead letters, on either backend: list them, replay them onto
//! their work queue, drop them (all, or one job's). [`DeadLetters`] is that part of the
//! broker seam; the admin API and `jobhost dead` call it.
//!
//! # Bounded in bytes
//! A dead letter is whatever a producer sent, of any size. A listing never builds a
//! payload: each letter is shown as its headers (at most [`HEADERS_MAX`], each value cut
//! to [`HEADER_VALUE_MAX`] bytes) and the first [`EXCERPT_MAX`] bytes of its body as text,
//! marked as cut and with the body's whole size ([`DeadLetterView`]). The body is scanned
//! once, without building it, for the job id and type of an envelope. A listing's answer
//! stops adding letters before it would pass [`LISTING_MAX_BYTES`] of JSON and says how
//! many it left out ([`DeadLetterList`]). Every operation takes one letter at a time from
//! the broker and is done with it before it takes the next, so the host holds at most one
//! whole body at a time, whatever the queue holds.
//!
//! # Letters stay as they were (RabbitMQ)
//! Reading a message off a queue without removing it is, in AMQP 0-9-1, a requeue: it
//! marks the message `redelivered`, and on a quorum queue every return counts towards the
//! delivery limit (20 by default since RabbitMQ 4.0), past which the broker drops the
//! message. So nothing here ever requeues. A letter read and kept is re-published, an
//! exact copy (body, properties, headers), to the tail of the dead-letter queue, confirmed
//! by the broker, and only then is the original acked. The copy is a new message: not
//! `redelivered`, its delivery count zero. The guarantees that follow:
//!
//! - **Never lost, at least once.** Each letter is confirmed at its destination before
//!   its original is acked. A host killed (or a connection lost) mid-operation leaves at
//!   most one letter both copied and unacked: the broker puts the original back at the
//!   head (`redelivered`, one return on a quorum queue) and its copy stays at the tail, so
//!   that letter is then there twice.
//! - **Order.** Letters keep their cyclic order; reading moves the head. A listing reads
//!   `min(present, limit)` letters, so one that reads every letter present leaves them in
//!   their order; on a longer queue the listed letters move behind the others, and the
//!   next listing shows the following ones. Letters dead-lettered during a listing
//!   interleave with the copies. A replay keeps the letters that are not envelopes in
//!   their order behind any new ones; taking one job's letter moves the letters before it
//!   behind the others.
//! - **Concurrent hosts.** Two operations on one dead-letter queue at once (two hosts, two
//!   dashboards) each still settle every letter they read as above, so the queue loses
//!   and gains nothing; a listing may then show a letter twice or miss one.
//!
//! A purge is the broker's own `queue.purge`: no letter passes through the host.
//!
//! The memory backend keeps the same contract with its queues in the process.

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::BrokerError;
use crate::envelope::Envelope;
use crate::text::{NAME_MAX, REASON_MAX, bounded, bounded_bytes};

/// Header naming why a message was dead-lettered.
pub(crate) const HEADER_DEATH_REASON: &str = "x-death-reason";
/// Header naming the work queue a dead letter came from.
pub(crate) const HEADER_ORIGINAL_QUEUE: &str = "x-original-queue";
/// Header holding the attempt a dead letter last tried.
pub(crate) const HEADER_ATTEMPTS: &str = "x-attempts";

/// Bytes of a dead letter's body shown in a listing.
pub const EXCERPT_MAX: usize = 1024;
/// Headers of a dead letter shown in a listing; the others are counted.
pub const HEADERS_MAX: usize = 32;
/// Bytes of a header's value shown in a listing.
pub const HEADER_VALUE_MAX: usize = 256;
/// Bytes of JSON a listing answers at most.
pub const LISTING_MAX_BYTES: usize = 1024 * 1024;

/// Dead-letter operations on the dead-letter queue `{queue}.dead` of a work queue.
pub trait DeadLetters: Send + Sync + 'static {
    /// The first `limit` dead letters of `queue`, oldest first, as bounded views, the whole
    /// answer at most [`LISTING_MAX_BYTES`] of JSON. The letters stay where they are (see
    /// the [module](self) for what that means on RabbitMQ).
    fn list_dead(
        &self,
        queue: &str,
        limit: usize,
    ) -> impl Future<Output = Result<DeadLetterList, BrokerError>> + Send;

    /// Put the dead letters of `queue` present when it starts back on it as first attempts
    /// with their job ids and trace contexts, each confirmed on `queue` before it leaves
    /// the dead-letter queue; bodies that are not envelopes stay dead.
    fn replay_dead(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Replayed, BrokerError>> + Send;

    /// Drop every dead letter of `queue`; how many there were.
    fn purge_dead(&self, queue: &str) -> impl Future<Output = Result<u32, BrokerError>> + Send;

    /// Take the dead letter of job `job_id` out of `queue`'s dead letters: replayed onto
    /// `queue` as a first attempt (confirmed before it leaves) when `replay`, dropped
    /// otherwise. Whether it was there.
    fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send;
}

/// A shared backend lists and replays like the backend it shares.
impl<B: DeadLetters> DeadLetters for std::sync::Arc<B> {
    fn list_dead(
        &self,
        queue: &str,
        limit: usize,
    ) -> impl Future<Output = Result<DeadLetterList, BrokerError>> + Send {
        (**self).list_dead(queue, limit)
    }

    fn replay_dead(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Replayed, BrokerError>> + Send {
        (**self).replay_dead(queue)
    }

    fn purge_dead(&self, queue: &str) -> impl Future<Output = Result<u32, BrokerError>> + Send {
        (**self).purge_dead(queue)
    }

    fn take_dead(
        &self,
        queue: &str,
        job_id: Uuid,
        replay: bool,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        (**self).take_dead(queue, job_id, replay)
    }
}

/// What [`DeadLetters::replay_dead`] did; the answer to `POST /dead/{queue}/replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Replayed {
    /// Jobs put back on the work queue as attempt 1 with their job ids.
    pub replayed: u32,
    /// Bodies that are not envelopes, left in the dead-letter queue.
    pub skipped: u32,
}

/// The envelope a replay publishes: the same job, as a first attempt on `queue`, without
/// its deadline, because an operator who replays a job wants it run, and an expired job
/// replayed with its deadline would only expire again; and without its unique lock,
/// which it let go of when it was dead-lettered: a replay takes no lock, so it is never
/// refused as a duplicate, and it cannot release a lock another job took since.
pub(crate) fn first_attempt(queue: &str, envelope: Envelope) -> Envelope {
    Envelope {
        queue: queue.to_owned(),
        attempt: 1,
        priority: 0,
        expires_at_ms: None,
        unique_lock: None,
        ..envelope
    }
}

/// A dead letter as a listing shows it: bounded whatever was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterView {
    /// The job id, when the body is an envelope.
    pub job_id: Option<Uuid>,
    /// The job type, when the body is an envelope (cut to [`NAME_MAX`] bytes).
    pub job_type: Option<String>,
    /// The last attempt tried, when known (0 for a body that is not an envelope).
    pub attempts: Option<u32>,
    /// Why it was dead-lettered, when the message says (cut to [`REASON_MAX`] bytes).
    pub reason: Option<String>,
    /// The message's headers by name, the first [`HEADERS_MAX`] of them, each value as
    /// text cut to [`HEADER_VALUE_MAX`] bytes.
    pub headers: BTreeMap<String, String>,
    /// Headers not shown, past [`HEADERS_MAX`].
    #[serde(default)]
    pub headers_left_out: u32,
    /// The first [`EXCERPT_MAX`] bytes of the body as one line of text: invalid UTF-8
    /// shown as U+FFFD, control characters escaped, a cut marked `… (N bytes in all)`.
    pub body: String,
    /// The body's whole size in bytes.
    pub body_bytes: u64,
    /// Whether `body` is only the start of it.
    pub body_cut: bool,
}

impl DeadLetterView {
    /// The view of a dead letter: its `body` as it was dead-lettered, and its headers by
    /// name with their values as text. The reason and attempts are read from the headers.
    pub(crate) fn new(body: &[u8], headers: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut shown = BTreeMap::new();
        let mut headers_left_out = 0u32;
        let mut reason = None;
        let mut attempts = None;
        for (name, value) in headers {
            if name == HEADER_DEATH_REASON {
                reason = Some(bounded(&value, REASON_MAX).into_owned());
            } else if name == HEADER_ATTEMPTS {
                attempts = value.parse().ok();
            }
            if shown.len() < HEADERS_MAX {
                shown.insert(
                    bounded(&name, NAME_MAX).into_owned(),
                    bounded(&value, HEADER_VALUE_MAX).into_owned(),
                );
            } else {
                headers_left_out = headers_left_out.saturating_add(1);
            }
        }
        let head = Envelope::head(body);
        let excerpt = bounded_bytes(body, EXCERPT_MAX);
        Self {
            job_id: head.as_ref().map(|head| head.job_id),
            job_type: head.map(|head| bounded(&head.job_type, NAME_MAX).into_owned()),
            attempts,
            reason,
            headers: shown,
            headers_left_out,
            // Escapes can make the text of a short body longer than an excerpt, and only a
            // cut text (a marker past the cut) is longer than one.
            body_cut: body.len() > EXCERPT_MAX || excerpt.len() > EXCERPT_MAX,
            body: excerpt,
            body_bytes: u64::try_from(body.len()).unwrap_or(u64::MAX),
        }
    }
}

/// The answer to `GET /dead/{queue}`: the first dead letters of a queue, at most
/// [`LISTING_MAX_BYTES`] of JSON in all.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeadLetterList {
    /// The letters listed, oldest first.
    pub letters: Vec<DeadLetterView>,
    /// How many letters the dead-letter queue held when the listing started.
    pub present: u64,
    /// Letters present but not listed: past the listing's limit, or past its byte cap.
    pub left_out: u64,
    /// Whether the byte cap ended the listing before its limit.
    pub capped: bool,
}

/// A listing being built: letters are added while the answer stays under its byte cap;
/// once one does not fit, no later one is added, so the listed letters are the first ones.
#[derive(Debug)]
pub(crate) struct Listing {
    list: DeadLetterList,
    bytes: usize,
    max_bytes: usize,
}

impl Listing {
    /// An empty listing of a queue holding `present` letters, capped at
    /// [`LISTING_MAX_BYTES`].
    pub(crate) fn new(present: u64) -> Self {
        Self::capped_at(present, LISTING_MAX_BYTES)
    }

    fn capped_at(present: u64, max_bytes: usize) -> Self {
        let list = DeadLetterList {
            present,
            ..DeadLetterList::default()
        };
        // Room for everything but the letters, whatever numbers it will hold.
        let frame = r#"{"letters":[],"present":18446744073709551615,"left_out":18446744073709551615,"capped":false}"#;
        Self {
            list,
            bytes: frame.len(),
            max_bytes,
        }
    }

    /// Add the view `letter` builds, unless the cap was reached; the view is only built
    /// while there is room.
    pub(crate) fn add(&mut self, letter: impl FnOnce() -> DeadLetterView) {
        if self.list.capped {
            return;
        }
        let letter = letter();
        // The letter's JSON and the comma before it.
        let size = serde_json::to_vec(&letter).map_or(usize::MAX, |json| json.len() + 1);
        if self.bytes.saturating_add(size) > self.max_bytes {
            self.list.capped = true;
            return;
        }
        self.bytes += size;
        self.list.letters.push(letter);
    }

    /// The answer.
    pub(crate) fn finish(mut self) -> DeadLetterList {
        let listed = u64::try_from(self.list.letters.len()).unwrap_or(u64::MAX);
        self.list.left_out = self.list.present.saturating_sub(listed);
        self.list
    }
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;

    #[test]
    fn a_replay_is_a_first_attempt_of_the_same_job_without_its_deadline_or_lock() {
        let payload = RawValue::from_string("{}".to_owned()).expect("json");
        let letter = Envelope {
            expires_at_ms: Some(crate::job::Deadline::from_epoch_ms(5)),
            unique_lock: Some("jobhost.unique.lock".to_owned()),
            ..Envelope::new("t", "q", payload).deferred(9).next_attempt()
        };
        let replayed = first_attempt("q", letter.clone());
        assert_eq!(replayed.job_id, letter.job_id);
        assert_eq!(
            (replayed.attempt, replayed.priority, replayed.expires_at_ms),
            (1, 0, None)
        );
        assert_eq!(replayed.unique_lock, None, "a replay takes no lock");
    }

    fn headers(reason: &str) -> Vec<(String, String)> {
        vec![
            (HEADER_DEATH_REASON.to_owned(), reason.to_owned()),
            (HEADER_ATTEMPTS.to_owned(), "3".to_owned()),
        ]
    }

    #[test]
    fn a_large_envelope_is_shown_as_its_job_and_the_start_of_its_body() {
        let payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(2_000_000));
        let payload = RawValue::from_string(payload).expect("valid JSON");
        let envelope = Envelope::new("big.Job", "q", payload);
        let body = envelope.encode();
        let view = DeadLetterView::new(&body, headers("fatal error: too big"));
        assert_eq!(view.job_id, Some(envelope.job_id));
        assert_eq!(view.job_type.as_deref(), Some("big.Job"));
        assert_eq!(
            (view.attempts, view.reason.as_deref()),
            (Some(3), Some("fatal error: too big"))
        );
        assert!(view.body_cut);
        assert_eq!(view.body_bytes, body.len() as u64);
        assert!(
            view.body.len() <= EXCERPT_MAX + crate::text::MARKER_MAX,
            "{} bytes",
            view.body.len()
        );
        assert!(
            view.body
                .ends_with(&format!("({} bytes in all)", body.len()))
        );
    }

    #[test]
    fn headers_and_bodies_from_a_hostile_producer_are_bounded_and_counted() {
        let mut many: Vec<(String, String)> = (0..100)
            .map(|i| (format!("h{i:03}"), "v".repeat(10_000)))
            .collect();
        many.push(("\u{1b}[31m".to_owned(), "\n".to_owned()));
        let view = DeadLetterView::new(b"\xff\xfe not json\n", many);
        assert_eq!(view.headers.len(), HEADERS_MAX);
        assert_eq!(view.headers_left_out, 101 - HEADERS_MAX as u32);
        assert!(
            view.headers
                .values()
                .all(|v| v.len() <= HEADER_VALUE_MAX + crate::text::MARKER_MAX)
        );
        assert_eq!((view.job_id, view.job_type), (None, None));
        assert_eq!(view.body, "\u{fffd}\u{fffd} not json\\n");
        assert!(!view.body_cut);
    }

    #[test]
    fn a_listing_stops_at_its_byte_cap_and_counts_what_it_left_out() {
        let mut listing = Listing::capped_at(50, 20_000);
        for _ in 0..50 {
            listing.add(|| DeadLetterView::new(&[b'a'; 5000], headers("r")));
        }
        let list = listing.finish();
        let json = serde_json::to_vec(&list).expect("serializes");
        assert!(json.len() <= 20_000, "{} bytes", json.len());
        assert!(list.capped);
        assert!(!list.letters.is_empty());
        assert_eq!(
            list.left_out,
            50 - list.letters.len() as u64,
            "every letter not listed is counted"
        );
    }
}
