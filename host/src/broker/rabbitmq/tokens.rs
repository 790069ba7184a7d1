//! Fleet-wide rate limits on RabbitMQ: a rate limit's tokens are the messages of its token
//! queue, a job spends one by taking it, and one host of the fleet refills the queue at the
//! rate (docs/flow-control.md, "Rate limits", has the guarantee).
//!
//! # Contract
//! - Taking is one `basic.get` with auto-ack: a token taken is spent, never given back. A
//!   missing token queue is declared (`x-max-length = burst`, `x-overflow =
//!   reject-publish`, `x-expires`) and the take finds none: a new scope starts empty.
//! - Every host that takes from a scope refills it, but only the one the broker makes the
//!   active consumer of the scope's leader queue `{token queue}.leader` publishes: a queue
//!   with `x-single-active-consumer`, which every refilling host consumes. Each publishes a
//!   ping into it every [`PING_EVERY`]; only the active consumer receives them, so a host
//!   leads while it heard a ping within [`LEAD_LEASE`]. A consumer that goes (its host
//!   killed, its connection lost) hands the pings, and so the lead, to the next one within
//!   about [`PING_EVERY`], and no host ever gets a channel refused for trying. The leader
//!   publishes, every [`TICK`], the tokens that came due since its last tick (fractions
//!   carried over, counted from when it took the lead), at most `burst` at once; the
//!   queue's length limit drops what would make more than `burst` wait.
//! - A host refills a scope only while it sees jobs of it: [`REFILL_IDLE`] after its last
//!   take it stops (and cancels its consumer), so an unused token queue expires. It refills
//!   at most [`MAX_REFILLED`] scopes at once; jobs of a scope beyond that wait for another
//!   host to refill it, or for a scope of this one to go idle (warned at most once a
//!   [`REFILL_IDLE`]).
//! - A message of a token queue that is not one of its tokens (its `type` and body say so)
//!   is dropped with a warning and never counts as a token; a take reads at most
//!   `burst + 1` messages.
//! - A hold (a service's `Retry-After`) purges the token queue and tells the leader, by a
//!   message of its own in the leader queue, which the broker hands to the active
//!   consumer only: the leader purges again (a token it published meanwhile goes too) and
//!   publishes none until the hold ends, then one at once and the rest at the rate. The
//!   hold's length is bounded by the longest hold a job can have; a hold message that no
//!   leader takes within the leader queue's message TTL is dropped, and a leader that dies
//!   during a hold takes it along: its successor refills at the rate (documented as such).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::BasicProperties;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, QueueDeclareOptions,
    QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::link::Link;
use super::permits::{bounded_queue, is_marked};
use super::session::{Failure, Session};
use crate::broker::{BrokerError, Tokens};
use crate::job::MAX_HOLD_DELAY;

/// The `type` property of a token message.
const TOKEN_TYPE: &str = "jobhost.token";

/// How often the leader of a scope publishes the tokens that came due.
const TICK: Duration = Duration::from_millis(100);

/// How often every refilling host pings a scope's leader queue.
const PING_EVERY: Duration = Duration::from_millis(300);

/// How long after the last ping it heard a host still leads.
const LEAD_LEASE: Duration = Duration::from_secs(1);

/// How long a host waits before it refills again after its channel failed.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The `type` property of a ping.
const PING_TYPE: &str = "jobhost.ping";

/// The `type` property of a hold: its body is the hold's length in milliseconds.
const HOLD_TYPE: &str = "jobhost.hold";

/// How long a host refills a scope after its last take from it.
const REFILL_IDLE: Duration = Duration::from_secs(60);

/// The most scopes a host refills at once: each costs it a channel, and a connection has
/// a few thousand at most, so a flood of new keys cannot take the ones its jobs need.
const MAX_REFILLED: usize = 256;

/// The scopes this host refills, each by a task of its own. Dropping it stops them.
#[derive(Debug)]
pub(super) struct Refills {
    link: Weak<Link>,
    scopes: Mutex<HashMap<String, Refiller>>,
    /// When this host last warned that it refills [`MAX_REFILLED`] scopes.
    warned: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Refiller {
    /// When this host last took from the scope.
    seen: Arc<Mutex<Instant>>,
    task: JoinHandle<()>,
}

impl Refills {
    pub(super) fn new(link: &Arc<Link>) -> Self {
        Self {
            link: Arc::downgrade(link),
            scopes: Mutex::new(HashMap::new()),
            warned: Mutex::new(None),
        }
    }

    /// Note a take from `tokens`' scope now, and refill it from this host unless it does.
    pub(super) fn seen(&self, tokens: &Tokens) {
        let mut scopes = self.scopes.lock().expect("refill list poisoned");
        if let Some(refiller) = scopes.get(&tokens.name)
            && !refiller.task.is_finished()
        {
            *refiller.seen.lock().expect("refill clock poisoned") = Instant::now();
            return;
        }
        if scopes.len() >= MAX_REFILLED {
            scopes.retain(|_, refiller| !refiller.task.is_finished());
        }
        if scopes.len() >= MAX_REFILLED {
            let mut warned = self.warned.lock().expect("refill warning poisoned");
            if warned.is_none_or(|at| at.elapsed() >= REFILL_IDLE) {
                *warned = Some(Instant::now());
                tracing::warn!(queue = %tokens.name, most = MAX_REFILLED, "this host refills as many token queues as it may; this one waits for another host, or for one of them to go idle");
            }
            return;
        }
        let seen = Arc::new(Mutex::new(Instant::now()));
        let task = tokio::spawn(refill(self.link.clone(), tokens.clone(), Arc::clone(&seen)));
        scopes.insert(tokens.name.clone(), Refiller { seen, task });
    }
}

impl Drop for Refills {
    fn drop(&mut self) {
        let scopes = self.scopes.get_mut().expect("refill list poisoned");
        for refiller in scopes.values() {
            refiller.task.abort();
        }
    }
}

/// Take one of `tokens` on `session`: `false` when none waits.
pub(super) async fn take(session: &Arc<Session>, tokens: &Tokens) -> Result<bool, Failure> {
    let channel = session.permit_channel().await.map_err(Failure::Lost)?;
    for _ in 0..=tokens.burst {
        let get = channel
            .basic_get(
                tokens.name.as_str().into(),
                BasicGetOptions { no_ack: true },
            )
            .await;
        let message = match get {
            Ok(message) => message,
            Err(error) if error.is_amqp_soft_error() => {
                // The token queue does not exist (yet, or any more): a new one starts
                // empty, and this host's refiller fills it.
                declare(session, tokens).await?;
                return Ok(false);
            }
            Err(error) => return Err(Failure::classify(&tokens.name, error)),
        };
        let Some(message) = message else {
            session.keep_permit_channel(channel);
            return Ok(false);
        };
        let delivery = message.delivery;
        if is_marked(
            &delivery.properties,
            &delivery.data,
            TOKEN_TYPE,
            &tokens.name,
        ) {
            session.keep_permit_channel(channel);
            return Ok(true);
        }
        tracing::warn!(queue = %tokens.name, "dropping a message of a token queue that is not one of its tokens");
    }
    session.keep_permit_channel(channel);
    Ok(false)
}

/// Hold `tokens` back for `delay`: purge the tokens saved up and tell the scope's leader to
/// publish none until `delay` has passed.
pub(super) async fn hold(
    session: &Arc<Session>,
    tokens: &Tokens,
    delay: Duration,
) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let hold = BasicProperties::default().with_type(HOLD_TYPE.into());
    let millis = delay.min(MAX_HOLD_DELAY).as_millis().to_string();
    publish(&channel, &leader_of(tokens), millis.as_bytes(), &hold).await?;
    match purge(&channel, tokens).await {
        Ok(()) => {
            let _ = channel.close(200, "held".into()).await;
            Ok(())
        }
        // No token queue: no token saved up to purge (the broker closed the channel).
        Err(error) if error.is_amqp_soft_error() => Ok(()),
        Err(error) => Err(Failure::classify(&tokens.name, error)),
    }
}

async fn purge(channel: &lapin::Channel, tokens: &Tokens) -> Result<(), lapin::Error> {
    channel
        .queue_purge(tokens.name.as_str().into(), QueuePurgeOptions::default())
        .await
        .map(drop)
}

/// The leader queue of `tokens`' scope.
fn leader_of(tokens: &Tokens) -> String {
    format!("{}.leader", tokens.name)
}

/// The length of a hold message: its body's milliseconds, at most the longest hold;
/// `None` for a body that is no number.
fn hold_length(body: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(body)
        .ok()
        .filter(|text| text.len() <= 20)?;
    let millis = text.parse::<u64>().ok()?;
    Some(Duration::from_millis(millis).min(MAX_HOLD_DELAY))
}

/// Declare `tokens`' queue (idempotent while its arguments are the same).
async fn declare(session: &Session, tokens: &Tokens) -> Result<(), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(
            tokens.name.as_str().into(),
            durable,
            bounded_queue(tokens.burst, tokens.expires()),
        )
        .await
        .map_err(|error| Failure::classify(&tokens.name, error))?;
    Ok(())
}

fn idle(seen: &Mutex<Instant>) -> bool {
    seen.lock().expect("refill clock poisoned").elapsed() >= REFILL_IDLE
}

/// Refill `tokens` from this host while it takes from them: lead the scope, or wait to.
async fn refill(link: Weak<Link>, tokens: Tokens, seen: Arc<Mutex<Instant>>) {
    while !idle(&seen) {
        let Some(link) = link.upgrade() else {
            return;
        };
        let Ok(session) = link.session().await else {
            return;
        };
        drop(link);
        match lead(&session, &tokens, &seen).await {
            Ok(()) => return,
            Err(Failure::Final(error)) => {
                tracing::warn!(queue = %tokens.name, %error, "cannot refill a token queue; trying again");
            }
            // This host lost its connection: refill on the next one.
            Err(Failure::Lost(_)) => {}
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Consume `tokens`' leader queue and, while the broker makes this host its active consumer,
/// publish the scope's tokens, until this host has not seen it for [`REFILL_IDLE`] (`Ok`);
/// an error when the channel is gone.
async fn lead(session: &Session, tokens: &Tokens, seen: &Mutex<Instant>) -> Result<(), Failure> {
    let leader = leader_of(tokens);
    let (channel, mut pings) = join_leader_queue(session, &leader).await?;
    declare(session, tokens).await?;
    let token = BasicProperties::default().with_type(TOKEN_TYPE.into());
    let ping = BasicProperties::default().with_type(PING_TYPE.into());
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let (mut pinged, mut heard) = (None::<Instant>, None::<Instant>);
    let mut bucket = Bucket::new(tokens, Instant::now());
    loop {
        ticks.tick().await;
        if idle(seen) {
            // Closing the channel cancels the consumer, which hands the lead on; the leader
            // queue goes with its last consumer.
            let _ = channel.close(200, "idle".into()).await;
            tracing::debug!(queue = %tokens.name, "stopped refilling an idle token queue");
            return Ok(());
        }
        let now = Instant::now();
        if pinged.is_none_or(|at| now - at >= PING_EVERY) {
            publish(&channel, &leader, b"", &ping).await?;
            pinged = Some(now);
        }
        while let Some(delivery) = pings.next().now_or_never() {
            match delivery {
                Some(Ok(message)) => {
                    heard = Some(now);
                    if is_hold(&message.properties)
                        && let Some(length) = hold_length(&message.data)
                    {
                        bucket.hold(now + length);
                        purge(&channel, tokens)
                            .await
                            .map_err(|error| Failure::classify(&tokens.name, error))?;
                        tracing::debug!(queue = %tokens.name, hold = ?length, "holding a token queue back");
                    }
                }
                Some(Err(error)) => return Err(Failure::Lost(error)),
                None => {
                    return Err(Failure::Final(BrokerError::Refused {
                        queue: leader,
                        reason: "the broker ended this host's consumer".to_owned(),
                    }));
                }
            }
        }
        let leading = heard.is_some_and(|at| now - at < LEAD_LEASE);
        for _ in 0..bucket.due(now, leading) {
            publish(&channel, &tokens.name, tokens.name.as_bytes(), &token).await?;
        }
    }
}

fn is_hold(properties: &BasicProperties) -> bool {
    properties
        .kind()
        .as_ref()
        .is_some_and(|kind| kind.as_str() == HOLD_TYPE)
}

/// A channel consuming `leader`, declared here if need be, and its consumer of pings.
async fn join_leader_queue(
    session: &Session,
    leader: &str,
) -> Result<(lapin::Channel, lapin::Consumer), Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    let gone_with_its_consumers = QueueDeclareOptions {
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(leader.into(), gone_with_its_consumers, leader_arguments())
        .await
        .map_err(|error| Failure::classify(leader, error))?;
    let no_ack = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let pings = channel
        .basic_consume(leader.into(), "".into(), no_ack, FieldTable::default())
        .await
        .map_err(|error| Failure::classify(leader, error))?;
    Ok((channel, pings))
}

/// The tokens a leader owes its scope: one per interval since it took the lead, the
/// fractions carried over, never more at once than the queue holds.
#[derive(Debug)]
struct Bucket {
    interval: u128,
    burst: u32,
    /// When the tokens owed were last counted.
    last: Instant,
    /// Nanoseconds owed and not yet a whole token.
    owed: u128,
    /// Until when a hold (a service's `Retry-After`) keeps every token back.
    held_until: Option<Instant>,
}

impl Bucket {
    fn new(tokens: &Tokens, now: Instant) -> Self {
        Self {
            interval: tokens.interval.as_nanos().max(1),
            burst: tokens.burst,
            last: now,
            owed: 0,
            held_until: None,
        }
    }

    /// Owe nothing until `until` (or a later hold's end), then one token at once and the
    /// rest at the rate.
    fn hold(&mut self, until: Instant) {
        self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
    }

    /// The tokens to publish at `now`: none while this host does not lead, which starts
    /// the count over from when it takes the lead.
    fn due(&mut self, now: Instant, leading: bool) -> u32 {
        if self.held_until.is_some_and(|until| now < until) {
            (self.last, self.owed) = (now, 0);
            return 0;
        }
        if let Some(until) = self.held_until.take() {
            // The hold ended at `until`: one token is due then, the rest at the rate.
            (self.last, self.owed) = (until, self.interval);
        }
        let since = now.saturating_duration_since(self.last).as_nanos();
        self.last = now;
        if !leading {
            self.owed = 0;
            return 0;
        }
        self.owed += since;
        let due = self.owed / self.interval;
        self.owed %= self.interval;
        // Never more than the queue holds: the rest would only be dropped.
        u32::try_from(due).unwrap_or(u32::MAX).min(self.burst)
    }
}

/// Publish on `channel`, unconfirmed and not mandatory: a token the full queue refuses, or
/// that finds the queue gone, is one the bucket would not have kept; a ping nobody hears
/// leads nobody.
async fn publish(
    channel: &lapin::Channel,
    queue: &str,
    body: &[u8],
    properties: &BasicProperties,
) -> Result<(), Failure> {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties.clone(),
        )
        .await
        .map(drop)
        .map_err(Failure::Lost)
}

/// The leader queue's arguments: one active consumer at a time; pings that nobody takes
/// at once are dropped; and a leader queue nobody ever consumed goes after a minute.
fn leader_arguments() -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(1000));
    arguments.insert("x-expires".into(), AMQPValue::LongLongInt(60_000));
    arguments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(per_second: u32, burst: u32, now: Instant) -> Bucket {
        let tokens = Tokens::for_queue("q", Duration::from_secs(1) / per_second, burst);
        Bucket::new(&tokens, now)
    }

    #[test]
    fn a_leader_owes_one_token_per_interval_and_carries_the_fractions_over() {
        let start = Instant::now();
        let mut bucket = bucket(10, 100, start);
        assert_eq!(bucket.due(start + Duration::from_millis(150), true), 1);
        assert_eq!(bucket.due(start + Duration::from_millis(200), true), 1);
        assert_eq!(bucket.due(start + Duration::from_millis(1_200), true), 10);
    }

    #[test]
    fn a_host_that_does_not_lead_owes_nothing_and_counts_from_when_it_takes_the_lead() {
        let start = Instant::now();
        let mut bucket = bucket(10, 100, start);
        assert_eq!(bucket.due(start + Duration::from_secs(5), false), 0);
        assert_eq!(bucket.due(start + Duration::from_millis(5_050), true), 0);
        assert_eq!(bucket.due(start + Duration::from_millis(5_100), true), 1);
    }

    #[test]
    fn a_held_leader_owes_nothing_until_the_hold_ends_then_one_token_and_the_rate() {
        let start = Instant::now();
        let mut bucket = bucket(10, 100, start);
        bucket.hold(start + Duration::from_secs(2));
        bucket.hold(start + Duration::from_secs(1));
        assert_eq!(bucket.due(start + Duration::from_millis(1_950), true), 0);
        assert_eq!(bucket.due(start + Duration::from_millis(2_050), true), 1);
        assert_eq!(bucket.due(start + Duration::from_millis(2_100), true), 1);
        assert_eq!(bucket.due(start + Duration::from_millis(2_400), true), 3);
    }

    #[test]
    fn a_hold_message_is_a_bounded_number_of_milliseconds_or_nothing() {
        assert_eq!(hold_length(b"1500"), Some(Duration::from_millis(1_500)));
        assert_eq!(hold_length(b"18446744073709551615"), Some(MAX_HOLD_DELAY));
        for body in [
            &b""[..],
            b"-1",
            b"1.5",
            b"\xff",
            b"18446744073709551616",
            &[b'1'; 64],
        ] {
            assert_eq!(hold_length(body), None, "{body:?}");
        }
    }

    #[test]
    fn never_more_tokens_at_once_than_the_queue_holds() {
        let start = Instant::now();
        let mut bucket = bucket(1_000, 20, start);
        assert_eq!(bucket.due(start + Duration::from_secs(60), true), 20);
    }
}
