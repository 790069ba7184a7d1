//! The queues of the memory backend, behind its one lock.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jobhost_sdk::QueueConfig;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::unique::Locks;
use crate::broker::HoldQueue;
use crate::envelope::Envelope;
use crate::trace::TraceContext;

/// A message in the dead-letter queue: the body as it was delivered, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The original body, byte for byte (it may not be an envelope).
    pub body: Vec<u8>,
    /// Why it was dead-lettered (RabbitMQ's `x-death-reason`).
    pub reason: String,
    /// The last attempt tried; 0 when the body was not an envelope.
    pub attempts: u32,
    /// The trace the message belonged to (RabbitMQ's `traceparent` and `tracestate`).
    pub trace: Option<TraceContext>,
}

impl DeadLetter {
    /// The dead letter's envelope with its trace context, unless its body was malformed.
    pub fn envelope(&self) -> Option<Envelope> {
        traced_envelope(&self.body, self.trace.as_ref())
    }
}

/// The envelope of a message body with the trace context of its headers.
fn traced_envelope(body: &[u8], trace: Option<&TraceContext>) -> Option<Envelope> {
    let envelope = Envelope::decode(body).ok()?;
    Some(Envelope {
        trace: trace.cloned(),
        ..envelope
    })
}

/// An envelope published into a hold queue.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldMessage {
    /// The envelope as it will be delivered again.
    pub envelope: Envelope,
    /// The hold queue's TTL.
    pub delay: Duration,
    /// When it entered the hold queue.
    pub held_at: Instant,
}

#[derive(Debug, Clone)]
pub(super) struct Message {
    pub(super) body: Vec<u8>,
    /// What RabbitMQ would carry in the `traceparent` and `tracestate` headers.
    pub(super) trace: Option<TraceContext>,
    priority: u8,
    seq: u64,
    pub(super) redelivered: bool,
}

impl Message {
    pub(super) fn new(body: Vec<u8>, priority: u8) -> Self {
        Self {
            body,
            trace: None,
            priority,
            seq: 0,
            redelivered: false,
        }
    }

    /// A job message: the envelope's body, and its trace context where headers would be.
    pub(super) fn of(envelope: &Envelope) -> Self {
        Self {
            trace: envelope.trace.clone(),
            ..Self::new(envelope.encode(), envelope.priority)
        }
    }

    /// The message's envelope with its trace context, unless its body is not one.
    fn envelope(&self) -> Option<Envelope> {
        traced_envelope(&self.body, self.trace.as_ref())
    }

    fn order_key(&self) -> (u8, Reverse<u64>) {
        (self.priority, Reverse(self.seq))
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.order_key() == other.order_key()
    }
}

impl Eq for Message {}

impl PartialOrd for Message {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Message {
    /// Highest priority first, then first in, first out.
    fn cmp(&self, other: &Self) -> Ordering {
        self.order_key().cmp(&other.order_key())
    }
}

#[derive(Debug)]
pub(super) struct State {
    queues: HashMap<String, QueueState>,
    /// Whether acked and held envelopes are kept for inspection.
    recording: bool,
    /// The unique locks held now.
    pub(super) unique: Locks,
}

impl Default for State {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            recording: true,
            unique: Locks::default(),
        }
    }
}

impl State {
    pub(super) fn unrecorded() -> Self {
        Self {
            recording: false,
            ..Self::default()
        }
    }

    pub(super) fn declare(&mut self, config: &QueueConfig) {
        let recording = self.recording;
        self.queues
            .entry(config.name.clone())
            .or_insert_with(|| QueueState::new(config.max_priority, recording));
    }

    pub(super) fn queue(&self, name: &str) -> Option<&QueueState> {
        self.queues.get(name)
    }

    pub(super) fn queue_mut(&mut self, name: &str) -> Option<&mut QueueState> {
        self.queues.get_mut(name)
    }

    pub(super) fn queue_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.queues.keys().cloned().collect();
        names.sort();
        names
    }
}

#[derive(Debug)]
pub(super) struct QueueState {
    max_priority: u8,
    ready: BinaryHeap<Message>,
    next_seq: u64,
    pub(super) notify: Arc<Notify>,
    pub(super) unacked: usize,
    pub(super) waiting: usize,
    pub(super) acked: Vec<Envelope>,
    pub(super) dead: Vec<DeadLetter>,
    pub(super) held: Vec<HeldMessage>,
    /// Every hold queue declared (ever, when recording; else those not yet expired), with
    /// its TTL and when it expires unless used again.
    pub(super) hold_expiry: HashMap<String, (Duration, Instant)>,
    /// Whether `acked` and `held` are kept.
    recording: bool,
}

impl QueueState {
    fn new(max_priority: u8, recording: bool) -> Self {
        Self {
            recording,
            max_priority,
            ready: BinaryHeap::new(),
            next_seq: 0,
            notify: Arc::new(Notify::new()),
            unacked: 0,
            waiting: 0,
            acked: Vec::new(),
            dead: Vec::new(),
            held: Vec::new(),
            hold_expiry: HashMap::new(),
        }
    }

    /// Enqueue at the back of its priority, capped like RabbitMQ at the queue's maximum.
    pub(super) fn push(&mut self, mut message: Message) {
        message.priority = message.priority.min(self.max_priority);
        message.seq = self.next_seq;
        self.next_seq += 1;
        self.ready.push(message);
        self.notify.notify_waiters();
    }

    /// Put an unsettled delivery back where it was, marked redelivered.
    pub(super) fn requeue(&mut self, mut message: Message) {
        self.unacked -= 1;
        message.redelivered = true;
        self.ready.push(message);
        self.notify.notify_waiters();
    }

    pub(super) fn pop(&mut self) -> Option<Message> {
        let message = self.ready.pop()?;
        self.unacked += 1;
        Some(message)
    }

    pub(super) fn ack(&mut self, message: &Message) {
        self.unacked -= 1;
        if self.recording
            && let Some(envelope) = message.envelope()
        {
            self.acked.push(envelope);
        }
    }

    /// Record a publish into a hold queue; declaring it again pushes its expiry back.
    pub(super) fn hold(
        &mut self,
        hold: HoldQueue,
        envelope: &Envelope,
        delay: Duration,
        now: Instant,
    ) {
        if !self.recording {
            self.hold_expiry
                .retain(|_, (_, expires_at)| *expires_at > now);
        }
        let expires_at = now + Duration::from_millis(hold.expires_ms());
        self.hold_expiry.insert(hold.name, (delay, expires_at));
        if self.recording {
            self.held.push(HeldMessage {
                envelope: envelope.clone(),
                delay,
                held_at: now,
            });
        }
        self.waiting += 1;
    }

    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub(super) fn pending(&self) -> Vec<Envelope> {
        let mut ready: Vec<&Message> = self.ready.iter().collect();
        ready.sort_by(|a, b| b.cmp(a));
        ready.iter().filter_map(|m| m.envelope()).collect()
    }

    pub(super) fn live_hold_queues(&self, now: Instant) -> Vec<(String, Duration)> {
        let mut live: Vec<(String, Duration)> = self
            .hold_expiry
            .iter()
            .filter(|(_, (_, expires_at))| *expires_at > now)
            .map(|(name, (ttl, _))| (name.clone(), *ttl))
            .collect();
        live.sort_by_key(|(_, ttl)| *ttl);
        live
    }
}
