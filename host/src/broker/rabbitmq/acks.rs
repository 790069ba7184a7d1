//! Settling the deliveries of one consumer channel with as few frames as possible.
//!
//! Each settlement is handed to one task per channel, which sends the frames in order:
//! - a requeue is a `basic.nack` of its own, sent at once;
//! - acks that complete a run of settled tags from the lowest unsettled one are sent as
//!   one `basic.ack` with `multiple`, naming the highest acked tag of the run;
//! - an ack held behind an unsettled lower tag (a slower job) is sent on its own after
//!   [`HOLD`], so a slow job never keeps the broker's prefetch window full of settled
//!   messages.
//!
//! Why one task: a `multiple` ack covers every unacked tag up to the one it names, so it
//! must never overtake the nack of a tag it covers, and the tag it names must still be
//! unacked when it arrives (RabbitMQ closes the channel on an unknown tag). One writer
//! keeps that order without a lock held across an await.
//!
//! Delivery tags of a channel start at 1 and grow by one per delivery, and deliveries are
//! handed out in tag order, so "every lower tag is settled" is a counter, not a set. A
//! delivery dropped without settlement stays unsettled for good: no `multiple` ack ever
//! covers it (the broker redelivers it when the channel closes), and the acks above it
//! go out one by one.
//!
//! An ack handed to the task is final for the worker: if the channel closes before the
//! frame is written, the broker redelivers the message (at-least-once).

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::Acker;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// How long an ack waits behind a lower unsettled tag before it is sent alone.
pub(super) const HOLD: Duration = Duration::from_millis(5);

/// One settlement of a delivery of the channel: its tag, and what sends its frame.
#[derive(Debug)]
pub(super) enum Settle<A = Acker> {
    Ack(u64, A),
    Requeue(u64, A),
}

/// The sender of a channel's settlements; its task ends when the last clone is dropped.
pub(super) type AckSender = mpsc::UnboundedSender<Settle>;

/// Start the settling task of a channel whose consumer consumes `queue`.
pub(super) fn start(queue: &str) -> AckSender {
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(run(receiver, queue.to_owned()));
    sender
}

/// A settled tag not yet covered by a `multiple` ack; `A` is what sends its frame.
#[derive(Debug)]
enum Held<A> {
    /// Acked by the worker, no frame sent yet.
    Ack { acker: A, since: Instant },
    /// Its frame is sent (a nack, or an ack sent alone); only the counter waits for it.
    Sent,
}

/// What to send, in this order.
#[derive(Debug)]
struct Frames<A> {
    alone: Vec<(A, Frame)>,
    multiple: Option<A>,
}

impl<A> Default for Frames<A> {
    fn default() -> Self {
        Self {
            alone: Vec::new(),
            multiple: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Ack,
    Nack,
}

/// The channel's settled tags above the lowest unsettled one.
#[derive(Debug)]
struct Window<A> {
    /// The lowest tag not known to be settled.
    lowest: u64,
    held: BTreeMap<u64, Held<A>>,
}

impl<A> Window<A> {
    fn new() -> Self {
        Self {
            lowest: 1,
            held: BTreeMap::new(),
        }
    }

    /// Take in one settlement; a requeue's nack goes out at once.
    fn settle(&mut self, settle: Settle<A>, now: Instant, frames: &mut Frames<A>) {
        match settle {
            Settle::Ack(tag, acker) => {
                self.held.insert(tag, Held::Ack { acker, since: now });
            }
            Settle::Requeue(tag, acker) => {
                frames.alone.push((acker, Frame::Nack));
                self.held.insert(tag, Held::Sent);
            }
        }
    }

    /// Advance past every settled tag from the lowest, naming the highest acked one of
    /// the run in a `multiple` ack.
    fn advance(&mut self, frames: &mut Frames<A>) {
        while let Some(held) = self.held.remove(&self.lowest) {
            if let Held::Ack { acker, .. } = held {
                frames.multiple = Some(acker);
            }
            self.lowest += 1;
        }
    }

    /// Send alone every ack held for [`HOLD`] or more.
    fn release_held(&mut self, now: Instant, frames: &mut Frames<A>) {
        for held in self.held.values_mut() {
            if let Held::Ack { since, .. } = held
                && now.duration_since(*since) >= HOLD
                && let Held::Ack { acker, .. } = std::mem::replace(held, Held::Sent)
            {
                frames.alone.push((acker, Frame::Ack));
            }
        }
    }

    /// When the oldest held ack is due to go out alone.
    fn next_release(&self) -> Option<Instant> {
        self.held
            .values()
            .filter_map(|held| match held {
                Held::Ack { since, .. } => Some(*since + HOLD),
                Held::Sent => None,
            })
            .min()
    }
}

async fn run(mut receiver: mpsc::UnboundedReceiver<Settle>, queue: String) {
    let mut window = Window::new();
    loop {
        let next = match window.next_release() {
            Some(due) => tokio::select! {
                settle = receiver.recv() => settle,
                () = sleep_until(due) => {
                    let mut frames = Frames::default();
                    window.release_held(Instant::now(), &mut frames);
                    send(&queue, frames).await;
                    continue;
                }
            },
            None => receiver.recv().await,
        };
        let Some(first) = next else { return };
        let now = Instant::now();
        let mut frames = Frames::default();
        window.settle(first, now, &mut frames);
        // Whatever else is already waiting goes into the same round: under load, many
        // settlements share one `multiple` ack.
        while let Ok(settle) = receiver.try_recv() {
            window.settle(settle, now, &mut frames);
        }
        window.advance(&mut frames);
        send(&queue, frames).await;
    }
}

/// Send `frames`: the lone ones first, so a nack is never overtaken by a `multiple` ack
/// that would cover its tag.
async fn send(queue: &str, frames: Frames<Acker>) {
    for (acker, frame) in frames.alone {
        let sent = match frame {
            Frame::Ack => acker.ack(BasicAckOptions::default()).await,
            Frame::Nack => {
                acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    })
                    .await
            }
        };
        report(queue, sent);
    }
    if let Some(acker) = frames.multiple {
        report(queue, acker.ack(BasicAckOptions { multiple: true }).await);
    }
}

/// A frame that could not be sent: its channel is gone, and the broker redelivers what
/// was unacked on it.
fn report(queue: &str, sent: Result<bool, lapin::Error>) {
    match sent {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(%queue, "a settlement's channel closed first; the broker redelivers")
        }
        Err(error) => {
            tracing::debug!(%queue, %error, "a settlement was not sent; the broker redelivers")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames a round sends, with tags standing in for ackers.
    fn round(window: &mut Window<u64>, settles: Vec<Settle<u64>>, now: Instant) -> Frames<u64> {
        let mut frames = Frames::default();
        for settle in settles {
            window.settle(settle, now, &mut frames);
        }
        window.advance(&mut frames);
        frames
    }

    fn ack(tag: u64) -> Settle<u64> {
        Settle::Ack(tag, tag)
    }

    #[test]
    fn acks_settled_in_order_go_out_as_one_multiple_ack_naming_the_highest() {
        let mut window = Window::new();
        let frames = round(&mut window, (1..=50).map(ack).collect(), Instant::now());
        assert!(frames.alone.is_empty());
        assert_eq!(frames.multiple, Some(50));
        assert_eq!(window.lowest, 51);
    }

    #[test]
    fn an_ack_above_an_unsettled_tag_waits_and_is_covered_once_the_gap_closes() {
        let mut window = Window::new();
        let now = Instant::now();
        let frames = round(&mut window, vec![ack(2), ack(3)], now);
        assert_eq!(
            (frames.alone.len(), frames.multiple),
            (0, None),
            "tag 1 still runs"
        );
        let frames = round(&mut window, vec![ack(1)], now);
        assert_eq!(frames.multiple, Some(3), "one frame for 1, 2 and 3");
    }

    #[test]
    fn an_ack_held_behind_a_slow_job_goes_out_alone_after_the_hold_and_never_twice() {
        let mut window = Window::new();
        let start = Instant::now();
        round(&mut window, vec![ack(2), ack(3)], start);
        assert_eq!(window.next_release(), Some(start + HOLD));
        let mut frames = Frames::default();
        window.release_held(start + HOLD, &mut frames);
        let alone: Vec<(u64, Frame)> = frames.alone;
        assert_eq!(alone, vec![(2, Frame::Ack), (3, Frame::Ack)]);
        assert_eq!(window.next_release(), None);
        let frames = round(&mut window, vec![ack(1)], start + HOLD);
        assert_eq!(
            frames.multiple,
            Some(1),
            "the multiple ack names 1, not a tag already acked"
        );
        assert_eq!(window.lowest, 4);
    }

    #[test]
    fn a_requeue_is_sent_first_and_never_named_by_a_multiple_ack() {
        let mut window = Window::new();
        let frames = round(
            &mut window,
            vec![ack(1), Settle::Requeue(2, 2), ack(3), Settle::Requeue(4, 4)],
            Instant::now(),
        );
        assert_eq!(frames.alone, vec![(2, Frame::Nack), (4, Frame::Nack)]);
        assert_eq!(frames.multiple, Some(3), "the highest acked tag of the run");
        assert_eq!(window.lowest, 5);
    }

    #[test]
    fn a_run_of_requeues_alone_sends_no_multiple_ack() {
        let mut window = Window::new();
        let frames = round(&mut window, vec![Settle::Requeue(1, 1)], Instant::now());
        assert_eq!(frames.multiple, None);
        assert_eq!(frames.alone, vec![(1, Frame::Nack)]);
    }
}
