//! The RabbitMQ [`Backend`], on lapin. No lapin type leaves this module.
//!
//! Topology (docs/architecture.md, "Wire format and topology"): [`Backend::declare`] declares the
//! work queue `q` (with `x-max-priority` and `x-message-ttl` when set) and its
//! dead-letter queue `q.dead`. A delayed publish declares the hold queue
//! `q.deferred.{ttl_ms}` right before publishing to it, unless this connection declared
//! it less than half a delay ago, because the hold queue expires after two delays
//! without a declaration; the declaration takes a channel of its own, because a refused
//! one closes its channel and must not take in-flight publishes with it.
//!
//! Every publish is persistent, `mandatory`, goes to the default exchange and returns
//! once confirmed; a nack is [`BrokerError::NotConfirmed`], an unroutable return
//! [`BrokerError::Unroutable`]. Publishes waiting at the same moment go out together,
//! pipelined on one confirm-mode channel behind one confirm wait, and each caller gets
//! its own message's outcome (a return is credited by its routing key and body, never by
//! the confirmation lapin hands it to); batches run concurrently over as many channels as
//! [`RabbitMqOptions::publisher_channels`] allows.
//!
//! A queue deleted behind the host's back is declared again: a publish returned as
//! unroutable from a queue this backend declared (a work queue, its dead-letter queue, a
//! hold queue) re-declares it and is sent once more; only a second return fails it.
//!
//! Reconnection: a supervisor task per backend notices a dropped connection (connection
//! events, reports from callers, a periodic check), reconnects with jittered exponential
//! backoff, re-declares every work queue declared so far, and then hands the new
//! connection to waiting publishes and consumers. A publish caught by an outage waits
//! for at most [`RabbitMqOptions::outage_timeout`] and is sent again on the new
//! connection, so a message may arrive twice, never not at all (at-least-once).
//!
//! Failover: the backend takes a list of broker nodes (the nodes of a cluster) and uses
//! the first that answers; a lost connection is replaced by one to the next node, with
//! the same backoff, topology re-declaration and confirm-before-ack as a reconnect to the
//! same node.
//!
//! Hold queues the broker does not empty: every
//! [`RabbitMqOptions::hold_sweep_interval`] a sweeper task looks at the head of each hold
//! queue this backend published into, and releases onto the work queue itself what the
//! broker kept for longer than its delay plus a grace (`sweep` has the contract), because
//! RabbitMQ 3.10 can stop expiring a quorum queue's messages after its leader moved.
//! Held messages carry a `timestamp` for it.
//!
//! Operator orders (pause, resume, cancel) travel on a stream queue every host follows,
//! and a paused queue is marked by a durable queue of its own (`stream` has the contract).
//! Unique jobs: a lock is a queue holding at most one message, the holder's job id
//! (`unique` has the contract).
//! Concurrency caps: a cap's permits are the messages of a permit queue, held unacked on
//! a channel of their own while a job runs, so a host's permits end with its connection
//! (`permits` has the contract).
//!
//! Rate limits: a rate limit's tokens are the messages of a token queue, spent by taking
//! them, and refilled at the rate by the one host of the fleet that holds the scope's
//! leader queue (`tokens` has the contract).
//!
//! Credentials never reach logs or errors: the URL is shown with its password masked.

mod acks;
mod admin;
mod batch;
mod batches;
mod codec;
mod consumer;
mod depth;
mod holds;
mod link;
mod nodes;
mod options;
mod permits;
mod recordings;
mod schedule;
mod session;
mod stream;
mod sweep;
mod tokens;
mod unique;
mod url;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jobhost_sdk::QueueConfig;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use batches::RabbitMqBatchFollower;
pub use consumer::{RabbitMqConsumer, RabbitMqDelivery};
use link::Link;
use nodes::Nodes;
pub use options::{RabbitMqOptions, ReconnectBackoff};
pub use permits::RabbitMqLease;
pub use stream::RabbitMqFollower;

use super::hold::check_queue_name;
use super::{
    Backend, BatchRecord, BrokerError, DeadLetterOut, HoldQueue, Permits, Taken, Tokens,
    UniqueLock, dead_letter_queue_name,
};
use crate::envelope::Envelope;
use crate::policy::HoldDelay;
use codec::{dead_letter_properties, held_properties, job_properties};

/// A RabbitMQ broker. Dropping it (or [`close`](Self::close)) stops its consumers and
/// closes the connection.
#[derive(Debug)]
pub struct RabbitMqBackend {
    link: Arc<Link>,
    supervisor: JoinHandle<()>,
    sweeper: JoinHandle<()>,
    refills: tokens::Refills,
    /// Its place among the fleet's schedulers (`schedule`).
    seat: schedule::Seat,
}

impl RabbitMqBackend {
    /// Connect to the broker at `url` (`amqp://` or, with the `tls` feature, `amqps://`)
    /// and start supervising the connection. Fails if the broker cannot be reached now:
    /// only an established backend waits out outages.
    ///
    /// `url` may list the nodes of a cluster, separated by commas
    /// (`amqp://a:5672/%2f,amqp://b:5672/%2f`): the first node that answers is used, and
    /// when its connection is lost the backend reconnects to the next one, so a host
    /// keeps working while any node of the cluster is up.
    pub async fn connect(url: &str, options: RabbitMqOptions) -> Result<Self, BrokerError> {
        if url.contains("amqps://") && !cfg!(feature = "tls") {
            return Err(BrokerError::Connection(format!(
                "`{}` needs TLS: build jobhost with its default feature `tls`",
                Nodes::parse(url)?.shown_all()
            )));
        }
        let link = Link::connect(Nodes::parse(url)?, options).await?;
        let supervisor = tokio::spawn(Arc::clone(&link).supervise());
        let sweeper = tokio::spawn(sweep::sweep(Arc::clone(&link)));
        let refills = tokens::Refills::new(&link);
        Ok(Self {
            link,
            supervisor,
            sweeper,
            refills,
            seat: schedule::Seat::default(),
        })
    }

    /// Close the connection; consumers end and further calls fail with
    /// [`BrokerError::Closed`].
    pub async fn close(&self) {
        self.link.close().await;
    }

    async fn publish_now(
        &self,
        queue: &str,
        body: &[u8],
        properties: lapin::BasicProperties,
    ) -> Result<(), BrokerError> {
        let properties = &properties;
        self.link
            .run(|session| async move { session.publish(queue, body, properties.clone()).await })
            .await
    }
}

impl RabbitMqBackend {
    /// Publish to `routing_key`, one of the queues of work queue `queue`; when the broker
    /// returns it as unroutable and this backend declared `queue`, declare its queues
    /// again and send it once more.
    async fn publish_redeclaring(
        &self,
        queue: &str,
        routing_key: &str,
        body: &[u8],
        properties: lapin::BasicProperties,
    ) -> Result<(), BrokerError> {
        let result = self
            .publish_now(routing_key, body, properties.clone())
            .await;
        let (Err(BrokerError::Unroutable { .. }), Some(config)) = (&result, self.link.known(queue))
        else {
            return result;
        };
        tracing::warn!(queue = %routing_key, "a queue was gone; declaring it again");
        let config = &config;
        self.link
            .run(|session| async move { session.declare_work_queue(config).await })
            .await?;
        self.publish_now(routing_key, body, properties).await
    }
}

impl Drop for RabbitMqBackend {
    /// Consumers hold channels of the connection, so it is closed explicitly rather
    /// than left to the last handle.
    fn drop(&mut self) {
        self.supervisor.abort();
        self.sweeper.abort();
        if let Some(session) = self.link.shut()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let link = Arc::clone(&self.link);
            runtime.spawn(async move { link.close_session(session).await });
        }
    }
}

impl Backend for RabbitMqBackend {
    type Consumer = RabbitMqConsumer;
    type Lease = RabbitMqLease;

    async fn declare(&self, queue: &QueueConfig) -> Result<(), BrokerError> {
        check_queue_name(&queue.name)?;
        self.link
            .run(|session| async move { session.declare_work_queue(queue).await })
            .await?;
        self.link.remember(queue);
        Ok(())
    }

    /// A delayed publish needs the work queue declared through this backend
    /// ([`BrokerError::UnknownQueue`] otherwise), because the hold queue takes its
    /// durability and must not release into a queue that does not exist, where the broker
    /// would drop the message without a word.
    async fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> Result<(), BrokerError> {
        check_queue_name(&envelope.queue)?;
        let body = envelope.encode();
        let Some(delay) = delay else {
            let properties = job_properties(envelope);
            return self
                .publish_redeclaring(&envelope.queue, &envelope.queue, &body, properties)
                .await;
        };
        let properties = held_properties(envelope, SystemTime::now());
        let hold = HoldQueue::for_delay(&envelope.queue, delay);
        let config = self
            .link
            .known(&envelope.queue)
            .ok_or_else(|| BrokerError::UnknownQueue(envelope.queue.clone()))?;
        let (config, hold, body, properties) = (&config, &hold, &body, &properties);
        let holds = &self.link.holds;
        let held = || {
            self.link.run(|session| async move {
                let sent = Instant::now();
                if !holds.covered(hold, session.generation, sent) {
                    session.declare_hold_queue(config, hold).await?;
                    holds.declared(&config.name, hold, session.generation, sent);
                }
                session.publish(&hold.name, body, properties.clone()).await
            })
        };
        let result = match held().await {
            Err(BrokerError::Unroutable { .. }) => {
                tracing::warn!(queue = %hold.name, "a hold queue was gone; declaring it again");
                holds.forget_declaration(hold);
                held().await
            }
            result => result,
        };
        if result.is_ok() {
            self.link.holds.used(&envelope.queue, hold);
        }
        result
    }

    async fn dead_letter(&self, letter: DeadLetterOut<'_>) -> Result<(), BrokerError> {
        check_queue_name(letter.queue)?;
        self.publish_redeclaring(
            letter.queue,
            &dead_letter_queue_name(letter.queue),
            letter.body,
            dead_letter_properties(&letter),
        )
        .await
    }

    async fn consume(&self, queue: &QueueConfig) -> Result<RabbitMqConsumer, BrokerError> {
        check_queue_name(&queue.name)?;
        RabbitMqConsumer::start(Arc::clone(&self.link), &queue.name, queue.prefetch).await
    }

    async fn take_unique(&self, lock: &UniqueLock, job_id: Uuid) -> Result<Taken, BrokerError> {
        unique::take(&self.link, lock, job_id).await
    }

    async fn release_unique(&self, lock: &UniqueLock, job_id: Uuid) -> Result<(), BrokerError> {
        unique::release(&self.link, lock, job_id).await
    }

    async fn record_batch(&self, record: &BatchRecord) -> Result<(), BrokerError> {
        self.append_batch_record(record).await
    }

    async fn take_permit(&self, permits: &Permits) -> Result<Option<RabbitMqLease>, BrokerError> {
        self.link
            .run(|session| async move { permits::take(&session, permits).await })
            .await
    }

    async fn take_token(&self, tokens: &Tokens) -> Result<bool, BrokerError> {
        self.refills.seen(tokens);
        self.link
            .run(|session| async move { tokens::take(&session, tokens).await })
            .await
    }

    async fn hold_tokens(&self, tokens: &Tokens, delay: Duration) -> Result<(), BrokerError> {
        self.refills.seen(tokens);
        self.link
            .run(|session| async move { tokens::hold(&session, tokens, delay).await })
            .await
    }

    fn inline_limit(&self) -> Option<Duration> {
        self.link.options.inline_limit
    }
}
