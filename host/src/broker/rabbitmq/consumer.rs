//! Consuming a work queue across reconnects.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use lapin::message::Delivery as AmqpDelivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer as AmqpConsumer};

use super::acks::{self, AckSender, Settle};
use super::codec;
use super::link::Link;
use super::session::{Failure, Session};
use crate::broker::{BrokerError, Consumer, Delivery};
use crate::trace::TraceContext;

/// How long closing a consumer waits to hand back messages it had prefetched but not
/// delivered.
const CLOSE_DRAIN: Duration = Duration::from_secs(5);

/// A subscription to one work queue that outlives connections: when its connection
/// drops it waits for the supervisor's reconnect and subscribes again.
///
/// Deliveries handed out before a reconnect belong to the old channel; settling them
/// fails with [`BrokerError::Connection`], and the broker redelivers them.
#[derive(Debug)]
pub struct RabbitMqConsumer {
    link: Arc<Link>,
    queue: String,
    prefetch: u16,
    subscription: Option<Subscription>,
}

#[derive(Debug)]
struct Subscription {
    channel: Arc<Channel>,
    consumer: AmqpConsumer,
    acks: AckSender,
}

impl RabbitMqConsumer {
    /// Subscribe, waiting through an outage for at most the outage timeout.
    pub(super) async fn start(
        link: Arc<Link>,
        queue: &str,
        prefetch: u16,
    ) -> Result<Self, BrokerError> {
        let subscription = link
            .run(|session| subscribe(session, queue, prefetch, &link))
            .await?;
        Ok(Self {
            link,
            queue: queue.to_owned(),
            prefetch,
            subscription: Some(subscription),
        })
    }

    /// Subscribe again on the current session, for as long as it takes; only
    /// [`BrokerError::Closed`] ends the wait.
    async fn resubscribe(&self) -> Result<Subscription, BrokerError> {
        let (queue, link) = (&self.queue, &self.link);
        let what = format!("resubscribing to `{queue}`");
        link.keep_trying(&what, |session| {
            subscribe(session, queue, self.prefetch, link)
        })
        .await
    }
}

/// Consume `queue` on a new channel of `session`, its settling task tracked by `link`.
async fn subscribe(
    session: Arc<Session>,
    queue: &str,
    prefetch: u16,
    link: &Link,
) -> Result<Subscription, Failure> {
    let channel = session.channel().await.map_err(Failure::Lost)?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .map_err(Failure::Lost)?;
    let consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|error| Failure::classify(queue, error))?;
    let channel = Arc::new(channel);
    Ok(Subscription {
        acks: acks::start(queue, prefetch, Arc::clone(&channel), &link.settling),
        channel,
        consumer,
    })
}

async fn next_message(consumer: &mut AmqpConsumer) -> Option<Result<AmqpDelivery, lapin::Error>> {
    std::future::poll_fn(|cx| Pin::new(&mut *consumer).poll_next(cx)).await
}

impl Consumer for RabbitMqConsumer {
    type Delivery = RabbitMqDelivery;

    async fn next(&mut self) -> Option<RabbitMqDelivery> {
        loop {
            let subscription = match &mut self.subscription {
                Some(subscription) => subscription,
                None => self.subscription.insert(self.resubscribe().await.ok()?),
            };
            match next_message(&mut subscription.consumer).await {
                Some(Ok(delivery)) => {
                    return Some(RabbitMqDelivery {
                        delivery,
                        acks: subscription.acks.clone(),
                    });
                }
                Some(Err(error)) => {
                    tracing::warn!(queue = %self.queue, %error, "consumer interrupted, subscribing again");
                    self.link.suspect();
                }
                None => {
                    tracing::warn!(queue = %self.queue, "the broker cancelled the consumer, subscribing again")
                }
            }
            self.subscription = None;
        }
    }

    async fn close(mut self) {
        let Some(mut subscription) = self.subscription.take() else {
            return;
        };
        let cancel = subscription
            .channel
            .basic_cancel(subscription.consumer.tag(), BasicCancelOptions::default());
        if let Err(error) = cancel.await {
            tracing::debug!(queue = %self.queue, %error, "cancelling the consumer failed");
            return;
        }
        // Messages prefetched but never handed out would stay unacked for as long as
        // a delivery still holds the channel open; give them back now.
        let drain = async {
            while let Some(Ok(delivery)) = next_message(&mut subscription.consumer).await {
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                if let Err(error) = delivery.acker.nack(requeue).await {
                    tracing::debug!(queue = %self.queue, %error, "handing back a prefetched message failed");
                }
            }
        };
        if tokio::time::timeout(CLOSE_DRAIN, drain).await.is_err() {
            tracing::debug!(queue = %self.queue, "the consumer did not finish cancelling in time");
        }
    }
}

/// A message taken from a work queue. Its settlement goes through the channel's settling
/// task (see `acks`), which coalesces acks; the delivery keeps that task, and so its
/// channel, open until settled, because the broker requeues whatever is unacked on a
/// channel that closes.
#[derive(Debug)]
pub struct RabbitMqDelivery {
    delivery: AmqpDelivery,
    acks: AckSender,
}

impl RabbitMqDelivery {
    fn settle(self, settle: fn(u64, lapin::Acker) -> Settle) -> Result<(), BrokerError> {
        let AmqpDelivery {
            delivery_tag,
            acker,
            ..
        } = self.delivery;
        self.acks.send(settle(delivery_tag, acker)).map_err(|_| {
            BrokerError::Connection(
                "the delivery's channel closed before it was settled; the broker redelivers it"
                    .to_owned(),
            )
        })
    }
}

impl Delivery for RabbitMqDelivery {
    fn body(&self) -> &[u8] {
        &self.delivery.data
    }

    fn redelivered(&self) -> bool {
        self.delivery.redelivered
    }

    fn trace_context(&self) -> Option<TraceContext> {
        codec::trace_context(&self.delivery.properties)
    }

    async fn ack(self) -> Result<(), BrokerError> {
        self.settle(Settle::Ack)
    }

    async fn requeue(self) -> Result<(), BrokerError> {
        self.settle(Settle::Requeue)
    }
}
