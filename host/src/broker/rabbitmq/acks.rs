//! Settling the deliveries of one consumer channel with as few frames as possible.
//!
//! Each settlement is handed to one task per channel, which sends the frames in order:
//! - a requeue is a `basic.nack` of its own, sent at once;
//! - acks that complete a run of settled tags from the lowest unsettled one are sent as
//!   one `basic.ack` with `multiple`, naming the highest acked tag of the run, once the
//!   runs not yet sent hold a batch of acks (a quarter of the prefetch) or the
//!   first of them has waited [`LINGER`];
//! - an ack held behind an unsettled lower tag (a slower job) is sent on its own after
//!   [`HOLD`], so a slow job never keeps the broker's prefetch window full of settled
//!   messages;
//! - when the channel's last delivery is gone, whatever is left goes out before the task
//!   ends, and the task holds the channel open until then.
//!
//! Why batches: the broker, which shares the machine's cores with the host, spends less per
//! job the more acks one frame carries (`BENCHMARKS.md`, "Acks in batches"), and the
//! linger bounds what a batch costs a slow queue: an ack goes out at most [`LINGER`] late.
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
//! frame is written (its connection lost), the broker redelivers the message
//! (at-least-once).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::{Acker, Channel};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::task::TaskTracker;

/// How long an ack waits behind a lower unsettled tag before it is sent alone.
pub(super) const HOLD: Duration = Duration::from_millis(5);

/// How long a completed run of acks waits for more to share its `multiple` ack.
pub(super) const LINGER: Duration = Duration::from_millis(1);

/// How many acks a `multiple` ack waits for (up to [`LINGER`]) on a channel with
/// `prefetch`: a quarter of the window, so three quarters stay in flight while a batch
/// fills; at least one.
fn batch(prefetch: u16) -> usize {
    usize::from(prefetch / 4).max(1)
}

/// One settlement of a delivery of the channel: its tag, and what sends its frame.
#[derive(Debug)]
pub(super) enum Settle<A = Acker> {
    Ack(u64, A),
    Requeue(u64, A),
}

/// The sender of a channel's settlements; its task ends when the last clone is dropped.
pub(super) type AckSender = mpsc::UnboundedSender<Settle>;

/// Start the settling task of `channel`, whose consumer consumes `queue` with `prefetch`,
/// on `tracker`. The task keeps the channel open until it has sent its last frame.
pub(super) fn start(
    queue: &str,
    prefetch: u16,
    channel: Arc<Channel>,
    tracker: &TaskTracker,
) -> AckSender {
    let (sender, receiver) = mpsc::unbounded_channel();
    tracker.spawn(run(receiver, queue.to_owned(), batch(prefetch), channel));
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

/// The acks of the runs completed since the last `multiple` ack, not yet sent.
#[derive(Debug)]
struct Ready<A> {
    /// The acker of the highest acked tag, which the `multiple` ack names.
    acker: A,
    /// How many acks the frame will carry.
    acks: usize,
    /// When the first of them was settled.
    since: Instant,
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

/// The channel's settled tags above the lowest unsettled one, and the completed runs
/// waiting to fill a batch.
#[derive(Debug)]
struct Window<A> {
    /// The lowest tag not known to be settled.
    lowest: u64,
    held: BTreeMap<u64, Held<A>>,
    ready: Option<Ready<A>>,
    /// How many acks make a `multiple` ack go out without waiting for [`LINGER`].
    batch: usize,
}

impl<A> Window<A> {
    fn new(batch: usize) -> Self {
        Self {
            lowest: 1,
            held: BTreeMap::new(),
            ready: None,
            batch,
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

    /// Advance past every settled tag from the lowest, adding the run's acks to the ready
    /// ones, which go out as one `multiple` ack once they fill a batch.
    fn advance(&mut self, frames: &mut Frames<A>) {
        while let Some(held) = self.held.remove(&self.lowest) {
            if let Held::Ack { acker, since } = held {
                match &mut self.ready {
                    Some(ready) => {
                        ready.acker = acker;
                        ready.acks += 1;
                        ready.since = ready.since.min(since);
                    }
                    None => {
                        self.ready = Some(Ready {
                            acker,
                            acks: 1,
                            since,
                        })
                    }
                }
            }
            self.lowest += 1;
        }
        let batch = self.batch;
        self.send_ready_if(frames, |ready| ready.acks >= batch);
    }

    /// Send what has waited long enough: alone, every ack held for [`HOLD`] or more; as a
    /// `multiple` ack, the ready acks once the first has lingered [`LINGER`].
    fn release_due(&mut self, now: Instant, frames: &mut Frames<A>) {
        for held in self.held.values_mut() {
            if let Held::Ack { since, .. } = held
                && now.duration_since(*since) >= HOLD
                && let Held::Ack { acker, .. } = std::mem::replace(held, Held::Sent)
            {
                frames.alone.push((acker, Frame::Ack));
            }
        }
        self.send_ready_if(frames, |ready| now.duration_since(ready.since) >= LINGER);
    }

    /// Name the ready acks' highest tag in the `multiple` ack, if `due` says they go now.
    fn send_ready_if(&mut self, frames: &mut Frames<A>, due: impl FnOnce(&Ready<A>) -> bool) {
        if self.ready.as_ref().is_some_and(due) {
            frames.multiple = self.ready.take().map(|ready| ready.acker);
        }
    }

    /// Everything not sent yet, for the end of the channel's deliveries: the held acks
    /// alone, the ready ones as a `multiple` ack.
    fn release_all(&mut self, frames: &mut Frames<A>) {
        for held in self.held.values_mut() {
            if let Held::Ack { acker, .. } = std::mem::replace(held, Held::Sent) {
                frames.alone.push((acker, Frame::Ack));
            }
        }
        frames.multiple = self.ready.take().map(|ready| ready.acker);
    }

    /// When the next frame is due without another settlement: the oldest held ack's hold,
    /// or the ready acks' linger.
    fn next_release(&self) -> Option<Instant> {
        let held = self.held.values().filter_map(|held| match held {
            Held::Ack { since, .. } => Some(*since + HOLD),
            Held::Sent => None,
        });
        let ready = self.ready.as_ref().map(|ready| ready.since + LINGER);
        held.chain(ready).min()
    }
}

async fn run(
    mut receiver: mpsc::UnboundedReceiver<Settle>,
    queue: String,
    batch: usize,
    channel: Arc<Channel>,
) {
    let mut window = Window::new(batch);
    loop {
        let next = match window.next_release() {
            Some(due) => tokio::select! {
                settle = receiver.recv() => settle,
                () = sleep_until(due) => {
                    let mut frames = Frames::default();
                    window.release_due(Instant::now(), &mut frames);
                    send(&queue, frames).await;
                    continue;
                }
            },
            None => receiver.recv().await,
        };
        let mut frames = Frames::default();
        let Some(first) = next else {
            window.release_all(&mut frames);
            send(&queue, frames).await;
            drop(channel);
            return;
        };
        let now = Instant::now();
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
        let mut window = Window::new(1);
        let frames = round(&mut window, (1..=50).map(ack).collect(), Instant::now());
        assert!(frames.alone.is_empty());
        assert_eq!(frames.multiple, Some(50));
        assert_eq!(window.lowest, 51);
    }

    #[test]
    fn an_ack_above_an_unsettled_tag_waits_and_is_covered_once_the_gap_closes() {
        let mut window = Window::new(1);
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
        let mut window = Window::new(1);
        let start = Instant::now();
        round(&mut window, vec![ack(2), ack(3)], start);
        assert_eq!(window.next_release(), Some(start + HOLD));
        let mut frames = Frames::default();
        window.release_due(start + HOLD, &mut frames);
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
        let mut window = Window::new(1);
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
        let mut window = Window::new(1);
        let frames = round(&mut window, vec![Settle::Requeue(1, 1)], Instant::now());
        assert_eq!(frames.multiple, None);
        assert_eq!(frames.alone, vec![(1, Frame::Nack)]);
    }

    #[test]
    fn a_batch_is_a_quarter_of_the_prefetch_and_at_least_one_ack() {
        assert_eq!(batch(200), 50);
        assert_eq!(batch(16), 4);
        assert_eq!(batch(3), 1);
        assert_eq!(batch(0), 1);
    }

    #[test]
    fn a_run_shorter_than_a_batch_goes_out_once_its_first_ack_has_lingered() {
        let mut window = Window::new(4);
        let start = Instant::now();
        let frames = round(&mut window, vec![ack(1), ack(2)], start);
        assert_eq!(
            frames.multiple, None,
            "two acks do not fill a batch of four"
        );
        assert_eq!(window.next_release(), Some(start + LINGER));
        let mut frames = Frames::default();
        window.release_due(start + LINGER / 2, &mut frames);
        assert_eq!(frames.multiple, None, "not due yet");
        window.release_due(start + LINGER, &mut frames);
        assert_eq!(frames.multiple, Some(2));
        assert_eq!(window.next_release(), None, "nothing is left to send");
    }

    #[test]
    fn runs_completed_apart_share_one_multiple_ack_once_they_fill_a_batch() {
        let mut window = Window::new(4);
        let start = Instant::now();
        assert_eq!(
            round(&mut window, vec![ack(1), ack(2)], start).multiple,
            None
        );
        let later = start + LINGER / 2;
        assert_eq!(
            window.next_release(),
            Some(start + LINGER),
            "the linger counts from the batch's first ack"
        );
        let frames = round(&mut window, vec![ack(4), ack(3)], later);
        assert_eq!(frames.multiple, Some(4), "one frame for 1 to 4");
        assert_eq!(window.next_release(), None);
    }

    #[test]
    fn a_requeue_inside_a_batch_goes_out_at_once_and_does_not_count_towards_it() {
        let mut window = Window::new(2);
        let frames = round(
            &mut window,
            vec![ack(1), Settle::Requeue(2, 2)],
            Instant::now(),
        );
        assert_eq!(frames.alone, vec![(2, Frame::Nack)]);
        assert_eq!(
            frames.multiple, None,
            "one ack does not fill a batch of two"
        );
        let frames = round(&mut window, vec![ack(3)], Instant::now());
        assert_eq!(frames.multiple, Some(3));
    }

    #[test]
    fn when_the_channel_has_no_deliveries_left_every_ack_not_sent_goes_out() {
        let mut window = Window::new(50);
        let frames = round(&mut window, vec![ack(1), ack(2), ack(4)], Instant::now());
        assert_eq!((frames.alone.len(), frames.multiple), (0, None));
        let mut frames = Frames::default();
        window.release_all(&mut frames);
        assert_eq!(
            frames.alone,
            vec![(4, Frame::Ack)],
            "4 alone: 3 was never settled, so no multiple ack may cover it"
        );
        assert_eq!(frames.multiple, Some(2));
        assert_eq!(window.next_release(), None);
    }
}
