//! A consume-only [`Backend`] on `amqprs`, so that the host's own [`Worker`] can be measured
//! on a client whose socket I/O runs as tasks on the runtime's threads, where lapin's runs
//! on a thread of its own: what a port of `host/src/broker/rabbitmq/` to amqprs would
//! spend per job, which the CPU target asks about (BENCHMARKS.md, "Missed targets"). A
//! measuring device, not a backend for users, and not a way forward: amqprs ends its
//! connection on a valid message whose headers hold a long string that is not UTF-8
//! (`jobhost-bench unusual`), which the broker would redeliver to every new connection of a
//! host built on it.
//!
//! # Contract
//! - [`Backend::consume`] opens a channel with the queue's prefetch and hands out its
//!   deliveries in tag order; the queue must exist (the bench declares and fills it).
//! - Acks coalesce as the host's RabbitMQ backend's do: one `basic.ack` with `multiple`
//!   for the run of settled tags from the lowest unsettled one, sent once it holds a
//!   quarter of the prefetch, or by a flusher every millisecond. A requeue is a
//!   `basic.nack` of its own, sent at once.
//! - Publishes and dead letters fail: the no-op jobs it serves never publish, and a job
//!   that tried would be requeued, not lost. [`Backend::declare`] does nothing.
//! - Concurrency caps are refused: the bench sets none, and a cap it cannot keep must not
//!   look kept.
//!
//! [`Worker`]: jobhost::worker::Worker

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicNackArguments, BasicQosArguments, Channel,
    ConsumerMessage,
};
use amqprs::connection::Connection;
use jobhost::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery, Permits, Tokens};
use jobhost::envelope::Envelope;
use jobhost::policy::HoldDelay;
use jobhost::trace::TraceContext;
use jobhost_sdk::QueueConfig;
use tokio::sync::{Mutex, mpsc};

/// One amqprs connection; a channel per consumer.
pub(crate) struct AmqprsBackend {
    connection: Connection,
}

impl AmqprsBackend {
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Self> {
        let connection = Connection::open(&crate::amqprs_floor::arguments(url)?).await?;
        Ok(Self { connection })
    }
}

/// What a publish gets: this backend only consumes.
fn refused(queue: &str) -> BrokerError {
    BrokerError::Refused {
        queue: queue.to_owned(),
        reason: "the bench's amqprs backend does not publish".to_owned(),
    }
}

fn lost(error: amqprs::error::Error) -> BrokerError {
    BrokerError::Connection(error.to_string())
}

impl Backend for AmqprsBackend {
    type Consumer = AmqprsConsumer;
    type Lease = ();

    async fn take_token(&self, tokens: &Tokens) -> Result<bool, BrokerError> {
        Err(BrokerError::Refused {
            queue: tokens.name.clone(),
            reason: "the amqprs bench backend keeps no rate limits".to_owned(),
        })
    }

    async fn hold_tokens(&self, tokens: &Tokens, _delay: Duration) -> Result<(), BrokerError> {
        self.take_token(tokens).await.map(drop)
    }

    async fn take_permit(&self, permits: &Permits) -> Result<Option<()>, BrokerError> {
        Err(BrokerError::Refused {
            queue: permits.name.clone(),
            reason: "the amqprs bench backend keeps no concurrency caps".to_owned(),
        })
    }

    async fn declare(&self, _queue: &QueueConfig) -> Result<(), BrokerError> {
        Ok(())
    }

    async fn publish(
        &self,
        envelope: &Envelope,
        _delay: Option<HoldDelay>,
    ) -> Result<(), BrokerError> {
        Err(refused(&envelope.queue))
    }

    async fn dead_letter(&self, letter: DeadLetterOut<'_>) -> Result<(), BrokerError> {
        Err(refused(letter.queue))
    }

    async fn consume(&self, queue: &QueueConfig) -> Result<AmqprsConsumer, BrokerError> {
        let channel = self.connection.open_channel(None).await.map_err(lost)?;
        channel
            .basic_qos(BasicQosArguments::new(0, queue.prefetch, false))
            .await
            .map_err(lost)?;
        let (_tag, deliveries) = channel
            .basic_consume_rx(BasicConsumeArguments::new(
                &queue.name,
                "jobhost-bench-amqprs-worker",
            ))
            .await
            .map_err(lost)?;
        let acks = Arc::new(Acks {
            channel,
            batch: u64::from(queue.prefetch / 4).max(1),
            state: Mutex::new(State {
                next: 1,
                settled: BTreeSet::new(),
                sent: 0,
            }),
        });
        let flusher = {
            let acks = Arc::clone(&acks);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    acks.flush().await;
                }
            })
        };
        Ok(AmqprsConsumer {
            deliveries,
            acks,
            flusher,
        })
    }

    /// The RabbitMQ backend's default, so the worker runs short jobs in its consume loop
    /// on either client.
    fn inline_limit(&self) -> Option<Duration> {
        Some(Duration::from_micros(50))
    }
}

/// Which tags of a channel are settled and acked.
struct State {
    /// The lowest tag not yet settled.
    next: u64,
    /// Settled tags above `next`.
    settled: BTreeSet<u64>,
    /// The highest tag a `multiple` ack covered.
    sent: u64,
}

/// The settlements of one channel; a lock held across each frame's send keeps `multiple`
/// acks in order, so none names a tag an earlier one already covered.
struct Acks {
    channel: Channel,
    batch: u64,
    state: Mutex<State>,
}

impl Acks {
    /// Settle `tag`: a requeue's `basic.nack` at once, an ack into the run it completes.
    async fn settle(&self, tag: u64, requeue: bool) -> Result<(), BrokerError> {
        let mut state = self.state.lock().await;
        if requeue {
            self.channel
                .basic_nack(BasicNackArguments::new(tag, false, true))
                .await
                .map_err(lost)?;
        }
        state.settled.insert(tag);
        while state.settled.first() == Some(&state.next) {
            state.settled.pop_first();
            state.next += 1;
        }
        if state.next - 1 - state.sent >= self.batch {
            Self::send(&self.channel, &mut state).await?;
        }
        Ok(())
    }

    /// Send what is settled and not yet acked. A failure is the channel's end, which the
    /// worker's next settlement or delivery reports.
    async fn flush(&self) {
        let mut state = self.state.lock().await;
        let _ = Self::send(&self.channel, &mut state).await;
    }

    async fn send(channel: &Channel, state: &mut State) -> Result<(), BrokerError> {
        let upto = state.next - 1;
        if upto > state.sent {
            channel
                .basic_ack(BasicAckArguments::new(upto, true))
                .await
                .map_err(lost)?;
            state.sent = upto;
        }
        Ok(())
    }
}

/// A consumer of one queue; its flusher ends with [`Consumer::close`] (or the process).
pub(crate) struct AmqprsConsumer {
    deliveries: mpsc::UnboundedReceiver<ConsumerMessage>,
    acks: Arc<Acks>,
    flusher: tokio::task::JoinHandle<()>,
}

impl Consumer for AmqprsConsumer {
    type Delivery = AmqprsDelivery;

    async fn next(&mut self) -> Option<AmqprsDelivery> {
        let message = self.deliveries.recv().await?;
        let deliver = message.deliver?;
        Some(AmqprsDelivery {
            body: message.content.unwrap_or_default(),
            tag: deliver.delivery_tag(),
            redelivered: deliver.redelivered(),
            acks: Arc::clone(&self.acks),
        })
    }

    async fn close(self) {
        self.flusher.abort();
        self.acks.flush().await;
    }
}

/// A delivery: its body, its tag, and the channel's settlements.
pub(crate) struct AmqprsDelivery {
    body: Vec<u8>,
    tag: u64,
    redelivered: bool,
    acks: Arc<Acks>,
}

impl Delivery for AmqprsDelivery {
    fn body(&self) -> &[u8] {
        &self.body
    }

    fn redelivered(&self) -> bool {
        self.redelivered
    }

    fn trace_context(&self) -> Option<TraceContext> {
        None
    }

    async fn ack(self) -> Result<(), BrokerError> {
        self.acks.settle(self.tag, false).await
    }

    async fn requeue(self) -> Result<(), BrokerError> {
        self.acks.settle(self.tag, true).await
    }
}
