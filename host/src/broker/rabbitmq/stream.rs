//! The streams the fleet follows ([`StreamReader`]), and [`Control`] on RabbitMQ: the
//! fleet's orders on the stream queue [`CONTROL_STREAM`], and each paused queue marked by a
//! quorum queue of its own ([`paused_marker_name`]).
//!
//! A stream keeps its messages whoever reads them, so every host reads every order, and a
//! host that starts reads those of the last [`CONTROL_RETENTION`] (`x-max-age`). Streams
//! work over AMQP 0-9-1 (RabbitMQ 3.9 and later): a consumer sets a prefetch, acks what it
//! read (an ack only gives credit; nothing leaves the stream) and says where to start with
//! `x-stream-offset`, here `first`.
//!
//! Because a stream forgets, the pause is kept apart from it: a pause declares the marker
//! queue before it publishes the order, a resume deletes the marker before it publishes,
//! and a host asks whether a queue is paused with a passive declaration of its marker. An
//! empty quorum queue costs the broker next to nothing, outlives broker restarts and stays
//! visible while a majority of a cluster's nodes is up.

use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Consumer as AmqpConsumer};

use super::RabbitMqBackend;
use super::codec::order_properties;
use super::link::Link;
use super::session::{Failure, Session};
use crate::broker::control::{
    CONTROL_RETENTION, CONTROL_STREAM, Command, Control, Followed, Follower, Order,
    paused_marker_name,
};
use crate::broker::{BrokerError, hold::check_queue_name};

/// How many orders the broker sends a follower ahead of its acks.
const FOLLOW_PREFETCH: u16 = 100;

/// The control stream's segment files.
const SEGMENT_BYTES: i64 = 1_000_000;

impl Control for RabbitMqBackend {
    type Follower = RabbitMqFollower;

    async fn order(&self, order: &Order) -> Result<(), BrokerError> {
        if let Command::Pause { queue } | Command::Resume { queue } = &order.command {
            check_queue_name(queue)?;
        }
        let body = &order.encode();
        self.link
            .run(|session| async move {
                declare_stream(&session, &CONTROL).await?;
                match &order.command {
                    Command::Pause { queue } => mark(&session, queue).await?,
                    Command::Resume { queue } => unmark(&session, queue).await?,
                    Command::Cancel { .. } => {}
                }
                session
                    .publish(CONTROL_STREAM, body, order_properties())
                    .await
            })
            .await
    }

    async fn is_paused(&self, queue: &str) -> Result<bool, BrokerError> {
        check_queue_name(queue)?;
        let marker = &paused_marker_name(queue);
        self.link
            // No marker, not paused.
            .run(|session| async move { Ok(session.messages_in(marker).await?.is_some()) })
            .await
    }

    async fn follow(&self) -> Result<RabbitMqFollower, BrokerError> {
        Ok(RabbitMqFollower(StreamReader::new(
            Arc::clone(&self.link),
            &CONTROL,
            FOLLOW_PREFETCH,
        )))
    }
}

/// A stream queue the fleet follows: its name, how long it keeps messages, its segments.
#[derive(Debug)]
pub(super) struct StreamSpec {
    pub(super) name: &'static str,
    pub(super) retention: std::time::Duration,
    /// The stream's segment files: the broker drops whole segments once every message in
    /// them is past the retention.
    pub(super) segment_bytes: i64,
}

/// The fleet's operator orders.
static CONTROL: StreamSpec = StreamSpec {
    name: CONTROL_STREAM,
    retention: CONTROL_RETENTION,
    // Small, because orders are small and few.
    segment_bytes: SEGMENT_BYTES,
};

/// Declare `stream` (idempotent: every host declares it the same way).
pub(super) async fn declare_stream(session: &Session, stream: &StreamSpec) -> Result<(), Failure> {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    let max_age = format!("{}s", stream.retention.as_secs());
    arguments.insert("x-max-age".into(), AMQPValue::LongString(max_age.into()));
    arguments.insert(
        "x-stream-max-segment-size-bytes".into(),
        AMQPValue::LongLongInt(stream.segment_bytes),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let channel = session.channel().await.map_err(Failure::Lost)?;
    channel
        .queue_declare(stream.name.into(), durable, arguments)
        .await
        .map_err(|error| Failure::classify(stream.name, error))?;
    Ok(())
}

/// Declare `queue`'s pause marker: an empty quorum queue, because a classic queue whose
/// node is down answers a passive declaration as if it did not exist, which would unpause
/// the queue for every host while that node is away; a quorum queue is there as long as a
/// majority of the cluster is.
async fn mark(session: &Session, queue: &str) -> Result<(), Failure> {
    let marker = paused_marker_name(queue);
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    let channel = session.channel().await.map_err(Failure::Lost)?;
    channel
        .queue_declare(marker.as_str().into(), durable, arguments)
        .await
        .map_err(|error| Failure::classify(&marker, error))?;
    Ok(())
}

/// Delete `queue`'s pause marker; deleting one that is not there succeeds.
async fn unmark(session: &Session, queue: &str) -> Result<(), Failure> {
    let marker = paused_marker_name(queue);
    let channel = session.channel().await.map_err(Failure::Lost)?;
    channel
        .queue_delete(marker.as_str().into(), QueueDeleteOptions::default())
        .await
        .map_err(|error| Failure::classify(&marker, error))?;
    Ok(())
}

/// A follower of the control stream across reconnects: each (re)subscription starts at the
/// oldest order kept and is announced as [`Followed::Joined`].
#[derive(Debug)]
pub struct RabbitMqFollower(StreamReader);

/// What a [`StreamReader`] read next.
pub(super) enum Read {
    /// It (re)subscribed: what follows starts from the oldest message kept.
    Joined,
    /// A message's body.
    Body(Vec<u8>),
}

/// A reader of a stream across reconnects, from its oldest message kept at each
/// (re)subscription.
#[derive(Debug)]
pub(super) struct StreamReader {
    link: Arc<Link>,
    stream: &'static StreamSpec,
    prefetch: u16,
    subscription: Option<(Channel, AmqpConsumer)>,
}

impl StreamReader {
    /// A reader of `stream` through `link`, sent `prefetch` messages ahead of its acks.
    pub(super) fn new(link: Arc<Link>, stream: &'static StreamSpec, prefetch: u16) -> Self {
        Self {
            link,
            stream,
            prefetch,
            subscription: None,
        }
    }

    /// The next message, or a (re)subscription; `None` once the link is closed.
    pub(super) async fn next(&mut self) -> Option<Read> {
        let name = self.stream.name;
        loop {
            let Some((_, consumer)) = &mut self.subscription else {
                let what = format!("following `{name}`");
                let (stream, prefetch) = (self.stream, self.prefetch);
                let subscribed = self
                    .link
                    .keep_trying(&what, |session| subscribe(session, stream, prefetch))
                    .await
                    .ok()?;
                self.subscription = Some(subscribed);
                return Some(Read::Joined);
            };
            let next = std::future::poll_fn(|cx| Pin::new(&mut *consumer).poll_next(cx)).await;
            match next {
                Some(Ok(delivery)) => {
                    // An ack only gives the stream credit to send more; a lost one costs
                    // nothing but a redelivery after the next subscription.
                    if let Err(error) = delivery.acker.ack(BasicAckOptions::default()).await {
                        tracing::debug!(stream = name, %error, "acking a stream message failed");
                    }
                    return Some(Read::Body(delivery.data));
                }
                Some(Err(error)) => {
                    tracing::warn!(stream = name, %error, "following the stream was interrupted, following again");
                    self.link.suspect();
                }
                None => {
                    tracing::warn!(
                        stream = name,
                        "the broker cancelled the follower, following again"
                    );
                }
            }
            self.subscription = None;
        }
    }
}

/// Consume `stream` from its first message on a channel of its own.
async fn subscribe(
    session: Arc<Session>,
    stream: &'static StreamSpec,
    prefetch: u16,
) -> Result<(Channel, AmqpConsumer), Failure> {
    declare_stream(&session, stream).await?;
    let channel = session.channel().await.map_err(Failure::Lost)?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .map_err(Failure::Lost)?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString("first".into()),
    );
    let consumer = channel
        .basic_consume(
            stream.name.into(),
            "".into(),
            BasicConsumeOptions::default(),
            arguments,
        )
        .await
        .map_err(|error| Failure::classify(stream.name, error))?;
    Ok((channel, consumer))
}

impl Follower for RabbitMqFollower {
    async fn next(&mut self) -> Option<Followed> {
        loop {
            match self.0.next().await? {
                Read::Joined => return Some(Followed::Joined),
                Read::Body(body) => match Order::decode(&body) {
                    Ok(order) => return Some(Followed::Order(order)),
                    Err(error) => {
                        tracing::warn!(stream = CONTROL_STREAM, %error, "skipping a message that is not an order");
                    }
                },
            }
        }
    }
}
