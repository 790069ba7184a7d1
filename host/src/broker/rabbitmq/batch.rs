//! Publishing many messages behind one confirm wait.
//!
//! A publish handed to a session waits in its [`Outbox`]; whoever gets one of the
//! session's publishing slots takes everything waiting (at most [`MAX_BATCH`]), pipelines
//! it on one confirm-mode channel and awaits every confirm, in a task of its own so that a
//! caller giving up never takes other callers' publishes with it. While every slot is busy,
//! publishes gather in the outbox, so under load one confirm wait covers a whole prefetch
//! window's retries, deferrals and dead letters. Nothing waits on purpose: a batch is what
//! is waiting when a slot is free, so a publish is never held back behind a slow job.
//!
//! Each caller gets the outcome of its own message:
//! - lapin resolves each publish's confirmation by its delivery tag (a `multiple` ack or
//!   nack resolves every tag it covers), so a nack fails only the publishes it names;
//! - a returned (unroutable) message is not attributed by tag: lapin hands a return to
//!   whichever confirmation of the channel completes next, and completes a `multiple`
//!   ack's tags in hash-map order. So the returns of a batch are pooled and each is
//!   credited by what it is, its routing key and body, to a publish of the batch that sent
//!   exactly that. Two publishes with the same routing key and body are the same message,
//!   so which of them takes a return does not matter, only how many do;
//! - a channel that fails fails every publish of the batch it had not confirmed yet; the
//!   caller sends it again on the next session (at-least-once: a message may arrive twice).

use std::io;
use std::sync::Mutex;

use futures_util::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Confirmation};
use tokio::sync::oneshot;

use super::session::Failure;
use crate::broker::BrokerError;

/// The most publishes sent behind one confirm wait, so that one batch's frames stay
/// bounded whatever the prefetch.
pub(super) const MAX_BATCH: usize = 256;

/// How a publish ends: what its caller is told.
type Outcome = Result<(), Failure>;

/// One publish waiting for a batch.
#[derive(Debug)]
struct Outgoing {
    routing_key: String,
    body: Vec<u8>,
    properties: BasicProperties,
    reply: oneshot::Sender<Outcome>,
}

/// The publishes of one session waiting for a batch, oldest first.
#[derive(Debug, Default)]
pub(super) struct Outbox(Mutex<Vec<Outgoing>>);

/// Publishes taken out of an [`Outbox`] to be sent together.
#[derive(Debug)]
pub(super) struct Batch(Vec<Outgoing>);

impl Outbox {
    /// Queue a publish; the receiver gets its outcome once a batch carried it.
    pub(super) fn push(
        &self,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> oneshot::Receiver<Outcome> {
        let (reply, outcome) = oneshot::channel();
        self.lock().push(Outgoing {
            routing_key: routing_key.to_owned(),
            body: body.to_vec(),
            properties,
            reply,
        });
        outcome
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The oldest waiting publishes, at most [`MAX_BATCH`]; `None` when nothing waits.
    pub(super) fn take(&self) -> Option<Batch> {
        let mut waiting = self.lock();
        if waiting.is_empty() {
            return None;
        }
        let count = waiting.len().min(MAX_BATCH);
        Some(Batch(waiting.drain(..count).collect()))
    }

    /// Fail every waiting publish: no channel could be opened for them.
    pub(super) fn fail_all(&self, error: &lapin::Error) {
        for outgoing in self.lock().drain(..) {
            // A caller that stopped waiting no longer needs the answer.
            let _ = outgoing.reply.send(Err(Failure::Lost(error.clone())));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Outgoing>> {
        self.0.lock().expect("outbox poisoned")
    }
}

/// The answer to a publish that its batch ended without giving, e.g. when the runtime
/// shut down under it: lost, so the caller tries again.
pub(super) fn unanswered() -> Failure {
    Failure::Lost(lapin::Error::from(io::Error::other(
        "the publish's batch ended without an answer",
    )))
}

impl Batch {
    /// Publish every message on `channel`, `mandatory`, to the default exchange, await
    /// every confirm and answer each caller. Returns whether the channel is fit for the
    /// next batch: not if anything was nacked (after a quorum queue's leader moved,
    /// RabbitMQ, seen on 3.10, can nack everything one channel sends to that queue while a
    /// new channel publishes normally), lost, or returned without a publish to credit.
    pub(super) async fn send(self, channel: &Channel) -> bool {
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let mut sent = Vec::with_capacity(self.0.len());
        let mut replies = Vec::with_capacity(self.0.len());
        let mut publishes = Vec::with_capacity(self.0.len());
        for outgoing in self.0 {
            publishes.push((outgoing.routing_key, outgoing.body, outgoing.properties));
            replies.push(outgoing.reply);
        }
        // Each publish registers its confirmation and queues its frames on its first
        // poll, so joining them pipelines the batch on the channel.
        let publishing = publishes.iter().map(|(routing_key, body, properties)| {
            channel.basic_publish(
                "".into(),
                routing_key.as_str().into(),
                options,
                body,
                properties.clone(),
            )
        });
        for publish in join_all(publishing).await {
            sent.push(async move { publish?.await });
        }
        let answers = join_all(sent).await.into_iter().map(Answer::from).collect();
        let keyed: Vec<(&str, &[u8])> = publishes
            .iter()
            .map(|(routing_key, body, _)| (routing_key.as_str(), body.as_slice()))
            .collect();
        let (outcomes, clean) = attribute(&keyed, answers);
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            // A caller that stopped waiting no longer needs the answer.
            let _ = reply.send(outcome);
        }
        clean
    }
}

/// What the broker said about one publish, with the return lapin handed it (which may
/// belong to another publish of the channel).
#[derive(Debug)]
enum Answer {
    Acked(Option<Returned>),
    Nacked(Option<Returned>),
    NotRequested,
    Lost(lapin::Error),
}

/// A message the broker returned as unroutable.
#[derive(Debug)]
struct Returned {
    routing_key: String,
    body: Vec<u8>,
    reason: String,
}

impl From<Result<Confirmation, lapin::Error>> for Answer {
    fn from(confirmation: Result<Confirmation, lapin::Error>) -> Self {
        let returned = |message: lapin::message::BasicReturnMessage| Returned {
            routing_key: message.delivery.routing_key.to_string(),
            reason: format!("{} {}", message.reply_code, message.reply_text),
            body: message.delivery.data,
        };
        match confirmation {
            Ok(Confirmation::Ack(message)) => Self::Acked(message.map(returned)),
            Ok(Confirmation::Nack(message)) => Self::Nacked(message.map(returned)),
            Ok(Confirmation::NotRequested) => Self::NotRequested,
            Err(error) => Self::Lost(error),
        }
    }
}

/// The outcome of each publish of a batch (`sent`: routing key and body, in order), from
/// the broker's `answers` in the same order, and whether the channel is fit for reuse.
/// Returns are credited by content, never by the answer that carried them (see the
/// module doc).
fn attribute(sent: &[(&str, &[u8])], answers: Vec<Answer>) -> (Vec<Outcome>, bool) {
    let mut clean = true;
    let mut returns = Vec::new();
    let mut verdicts = Vec::with_capacity(answers.len());
    for answer in answers {
        let verdict = match answer {
            Answer::Acked(returned) => {
                returns.extend(returned);
                Verdict::Confirmed
            }
            Answer::Nacked(returned) => {
                returns.extend(returned);
                clean = false;
                Verdict::Nacked("the broker nacked it")
            }
            Answer::NotRequested => {
                clean = false;
                Verdict::Nacked("the channel was not in confirm mode")
            }
            Answer::Lost(error) => {
                clean = false;
                Verdict::Lost(error)
            }
        };
        verdicts.push(verdict);
    }
    let outcomes = sent
        .iter()
        .zip(verdicts)
        .map(|(&(routing_key, body), verdict)| {
            let taken = returns
                .iter()
                .position(|returned| returned.routing_key == routing_key && returned.body == body)
                .map(|at| returns.swap_remove(at));
            match (verdict, taken) {
                (Verdict::Lost(error), _) => Err(Failure::Lost(error)),
                (_, Some(returned)) => Err(Failure::Final(BrokerError::Unroutable {
                    queue: routing_key.to_owned(),
                    reason: returned.reason,
                })),
                (Verdict::Confirmed, None) => Ok(()),
                (Verdict::Nacked(reason), None) => Err(Failure::Final(BrokerError::NotConfirmed {
                    queue: routing_key.to_owned(),
                    reason: reason.to_owned(),
                })),
            }
        })
        .collect();
    // A return credited to no publish of the batch means the channel's bookkeeping is not
    // what this module assumes; a new channel starts clean.
    (outcomes, clean && returns.is_empty())
}

/// One publish's confirmation, before returns are credited.
#[derive(Debug)]
enum Verdict {
    Confirmed,
    Nacked(&'static str),
    Lost(lapin::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn returned(routing_key: &str, body: &[u8]) -> Returned {
        Returned {
            routing_key: routing_key.to_owned(),
            body: body.to_vec(),
            reason: "312 NO_ROUTE".to_owned(),
        }
    }

    fn is_unroutable(outcome: &Outcome) -> bool {
        matches!(outcome, Err(Failure::Final(BrokerError::Unroutable { .. })))
    }

    #[test]
    fn a_return_is_credited_to_the_publish_that_sent_it_not_to_the_answer_that_carried_it() {
        let sent = [("q.deferred.1000", &b"one"[..]), ("q.dead", &b"two"[..])];
        // lapin handed the dead letter's return to the retry's confirmation.
        let answers = vec![
            Answer::Acked(Some(returned("q.dead", b"two"))),
            Answer::Acked(None),
        ];
        let (outcomes, clean) = attribute(&sent, answers);
        assert!(outcomes[0].is_ok(), "the retry was routed and confirmed");
        assert!(is_unroutable(&outcomes[1]), "the dead letter was returned");
        assert!(
            clean,
            "every return was credited, so the channel can be reused"
        );
    }

    #[test]
    fn a_nack_fails_only_the_publish_it_names_and_retires_the_channel() {
        let sent = [("a", &b"1"[..]), ("b", &b"2"[..]), ("c", &b"3"[..])];
        let answers = vec![
            Answer::Acked(None),
            Answer::Nacked(None),
            Answer::Acked(None),
        ];
        let (outcomes, clean) = attribute(&sent, answers);
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok());
        assert!(matches!(
            outcomes[1],
            Err(Failure::Final(BrokerError::NotConfirmed { ref queue, .. })) if queue == "b"
        ));
        assert!(!clean, "a nacked channel is not reused");
    }

    #[test]
    fn identical_publishes_take_as_many_returns_as_came_back() {
        let sent = [("q.dead", &b"same"[..]), ("q.dead", &b"same"[..])];
        let answers = vec![
            Answer::Acked(None),
            Answer::Acked(Some(returned("q.dead", b"same"))),
        ];
        let (outcomes, _) = attribute(&sent, answers);
        let failed = outcomes
            .iter()
            .filter(|outcome| is_unroutable(outcome))
            .count();
        let confirmed = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        assert_eq!((failed, confirmed), (1, 1), "one came back, one was routed");
    }

    #[test]
    fn a_return_that_matches_no_publish_of_the_batch_retires_the_channel() {
        let sent = [("a", &b"1"[..])];
        let answers = vec![Answer::Acked(Some(returned("elsewhere", b"x")))];
        let (outcomes, clean) = attribute(&sent, answers);
        assert!(outcomes[0].is_ok(), "its own publish was routed");
        assert!(!clean);
    }

    #[test]
    fn an_outbox_hands_out_its_oldest_publishes_in_batches_of_at_most_the_bound() {
        let outbox = Outbox::default();
        let _outcomes: Vec<_> = (0..MAX_BATCH + 1)
            .map(|n| outbox.push(&n.to_string(), b"", BasicProperties::default()))
            .collect();
        let first = outbox.take().expect("publishes wait");
        assert_eq!(first.0.len(), MAX_BATCH);
        assert_eq!(first.0[0].routing_key, "0", "oldest first");
        let rest = outbox.take().expect("one is left");
        assert_eq!(rest.0.len(), 1);
        assert!(outbox.take().is_none() && outbox.is_empty());
    }
}
