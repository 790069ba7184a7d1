//! One connection to the broker and the channels opened on it. A session never
//! outlives its connection: when the connection drops, the supervisor opens a new
//! session and the old one is discarded with everything opened on it.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobhost_sdk::{QueueConfig, QueueType};
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Semaphore;

use super::RabbitMqOptions;
use super::batch::{self, Outbox};
use super::codec::{
    dead_letter_queue_arguments, declare_options, hold_queue_arguments, work_queue_arguments,
};
use super::options::TlsFiles;
use super::url::target;
use crate::broker::{BrokerError, HoldQueue, dead_letter_queue_name};

/// Idle declaration channels kept for reuse; more are opened under load and closed
/// again afterwards.
const SPARE_CHANNELS: usize = 8;

/// Idle permit channels kept for reuse: as many as a host at the default concurrency holds
/// permits at once, so a busy capped queue does not open and close a channel per job.
const IDLE_PERMIT_CHANNELS: usize = 64;

/// How long closing waits for the broker's reply: a broker that does not answer must not
/// keep a stopping host from exiting.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Why one try on one session failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The broker answered and the answer stands: trying again cannot help.
    Final(BrokerError),
    /// The connection or channel went away; a new session may succeed.
    Lost(lapin::Error),
}

impl Failure {
    /// A failed operation on `queue`: refused when the broker closed the channel over
    /// it (a channel-level error such as `PRECONDITION_FAILED` or `NOT_FOUND`), lost
    /// otherwise.
    pub(super) fn classify(queue: &str, error: lapin::Error) -> Self {
        if error.is_amqp_soft_error() {
            Self::Final(BrokerError::Refused {
                queue: queue.to_owned(),
                reason: error.to_string(),
            })
        } else {
            Self::Lost(error)
        }
    }

    /// A failed declaration of `queue` as a `wanted` queue: like [`Failure::classify`],
    /// except that a refusal that shows the queue exists as the other type becomes
    /// [`BrokerError::QueueTypeConflict`], whose message says what to do. The broker names
    /// the first argument that differs: `x-queue-type`, or, declaring a quorum queue,
    /// the existing queue's `x-max-priority`, which only a classic queue has.
    pub(super) fn classify_declaration(
        queue: &str,
        wanted: QueueType,
        error: lapin::Error,
    ) -> Self {
        match Self::classify(queue, error) {
            Self::Final(BrokerError::Refused { queue, reason })
                if reason.contains("'x-queue-type'")
                    || (wanted == QueueType::Quorum && reason.contains("'x-max-priority'")) =>
            {
                Self::Final(BrokerError::QueueTypeConflict {
                    queue,
                    wanted,
                    reason,
                })
            }
            other => other,
        }
    }
}

/// One live connection and its channels.
#[derive(Debug)]
pub(super) struct Session {
    /// Counts sessions, so waiters can tell a new one from the one that failed them.
    pub(super) generation: u64,
    /// Which of the link's broker nodes it is connected to.
    pub(super) node: usize,
    connection: Connection,
    /// Publishes waiting for a batch (see `batch`).
    outbox: Outbox,
    /// Idle confirm-mode channels. Each carries one batch at a time and is kept only when
    /// every confirm and return of its batch was accounted for, so the next batch starts
    /// on a channel with nothing outstanding.
    publishers: Arc<Mutex<Vec<Channel>>>,
    /// Bounds the batches in flight, and so the publisher channels, per session.
    publishing: Arc<Semaphore>,
    /// Idle channels for declarations: each declaration takes its own, because a
    /// refused one closes its channel, and nothing else must be on it then.
    spare: Mutex<Vec<Channel>>,
    /// Idle channels for taking permits: each holds nothing while here (see `permits`).
    permit_channels: Mutex<Vec<Channel>>,
    /// Held while this session makes a permit queue, because the broker's lock (an
    /// exclusive queue) keeps out other connections only, not this one's other tasks.
    pub(super) making_permits: tokio::sync::Mutex<()>,
    /// Whether this session declared the batch log's stream, which every batch record is
    /// published to (see `batches`).
    pub(super) batch_log_declared: std::sync::atomic::AtomicBool,
}

impl Session {
    /// Connect and open the publisher channels.
    pub(super) async fn open(
        url: &str,
        node: usize,
        options: &RabbitMqOptions,
        generation: u64,
    ) -> Result<Self, lapin::Error> {
        let properties = ConnectionProperties::default()
            .with_connection_name(options.connection_name.as_str().into());
        let uri = target(url, options)
            .map_err(|reason| io::Error::new(io::ErrorKind::InvalidInput, reason))?;
        let connecting = Connection::connect_uri_with_config(
            uri,
            properties,
            tls_config(&options.tls),
            lapin::runtime::default_runtime()?,
        );
        // Bounded, because a broker that stops in the middle of the handshake can leave
        // it waiting for a reply that never comes.
        let connection = tokio::time::timeout(options.outage_timeout, connecting)
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", options.outage_timeout),
                )
            })??;
        Ok(Self {
            generation,
            node,
            connection,
            outbox: Outbox::default(),
            publishers: Arc::new(Mutex::new(Vec::new())),
            publishing: Arc::new(Semaphore::new(options.publisher_channels)),
            spare: Mutex::new(Vec::new()),
            permit_channels: Mutex::new(Vec::new()),
            making_permits: tokio::sync::Mutex::new(()),
            batch_log_declared: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the connection is still up.
    pub(super) fn is_connected(&self) -> bool {
        self.connection.status().connected()
    }

    /// The connection, for listening to its events.
    pub(super) fn connection(&self) -> &Connection {
        &self.connection
    }

    /// A new channel of its own, e.g. for a consumer.
    pub(super) async fn channel(&self) -> Result<Channel, lapin::Error> {
        self.connection.create_channel().await
    }

    /// Close the connection, best effort: it may be gone already, or the broker may not
    /// answer, so the wait for its reply is bounded by [`CLOSE_GRACE`].
    pub(super) async fn close(&self) {
        if !self.is_connected() {
            return;
        }
        let close = self.connection.close(200, "jobhost closing".into());
        match tokio::time::timeout(CLOSE_GRACE, close).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, "closing the broker connection failed"),
            Err(_) => tracing::debug!(?CLOSE_GRACE, "the broker did not answer the close"),
        }
    }

    /// Publish to the default exchange, `mandatory`, and wait for the confirm. The publish
    /// goes out in a batch with whatever else waits to be published (see `batch`).
    pub(super) async fn publish(
        &self,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), Failure> {
        let outcome = self.outbox.push(routing_key, body, properties);
        // Publishes that are ready at the same moment (jobs of one prefetch window
        // finishing together) join this one's batch.
        tokio::task::yield_now().await;
        self.send_waiting().await;
        outcome.await.unwrap_or_else(|_| Err(batch::unanswered()))
    }

    /// Take a publishing slot and send everything waiting in the outbox as one batch,
    /// unless another sender took it all first. The batch runs in a task of its own, which
    /// answers every publish in it and keeps its slot until its confirms are in.
    async fn send_waiting(&self) {
        let slot = Arc::clone(&self.publishing)
            .acquire_owned()
            .await
            .expect("the publishing semaphore is never closed");
        if self.outbox.is_empty() {
            return;
        }
        let channel = match self.idle_publisher().await {
            Ok(channel) => channel,
            Err(error) => return self.outbox.fail_all(&error),
        };
        let Some(batch) = self.outbox.take() else {
            return self.release_publisher(channel);
        };
        let idle = Arc::clone(&self.publishers);
        tokio::spawn(async move {
            let _slot = slot;
            // Dropped rather than kept (an error, a nack, an unaccounted return), the
            // channel is closed, because something may still be outstanding on it.
            if batch.send(&channel).await {
                idle.lock().expect("publisher list poisoned").push(channel);
            }
        });
    }

    /// Declare a work queue and its dead-letter queue.
    pub(super) async fn declare_work_queue(&self, config: &QueueConfig) -> Result<(), Failure> {
        let dead = dead_letter_queue_name(&config.name);
        self.declare(&config.name, config, work_queue_arguments(config))
            .await?;
        self.declare(&dead, config, dead_letter_queue_arguments(config))
            .await
    }

    /// Declare (and so keep alive) the hold queue in front of `config`'s work queue; the
    /// backend's hold-queue registry says when a declaration is due (see `holds`).
    pub(super) async fn declare_hold_queue(
        &self,
        config: &QueueConfig,
        hold: &HoldQueue,
    ) -> Result<(), Failure> {
        self.declare(&hold.name, config, hold_queue_arguments(config, hold))
            .await
    }

    /// How many messages `queue` holds, asked by a passive declaration, which takes
    /// nothing off it; `None` when the broker says there is no such queue (`NOT_FOUND`,
    /// which closes the channel it came on, so only a channel that answered is kept).
    pub(super) async fn messages_in(&self, queue: &str) -> Result<Option<u32>, Failure> {
        let channel = self.spare_channel().await.map_err(Failure::Lost)?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        match channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
        {
            Ok(declared) => {
                self.return_spare(channel);
                Ok(Some(declared.message_count()))
            }
            Err(error) => match Failure::classify(queue, error) {
                Failure::Final(_) => Ok(None),
                lost => Err(lost),
            },
        }
    }

    /// Declare `queue`, one of the queues of `config`'s topology.
    async fn declare(
        &self,
        queue: &str,
        config: &QueueConfig,
        arguments: FieldTable,
    ) -> Result<(), Failure> {
        let channel = self.spare_channel().await.map_err(Failure::Lost)?;
        channel
            .queue_declare(queue.into(), declare_options(config), arguments)
            .await
            .map_err(|error| Failure::classify_declaration(queue, config.queue_type, error))?;
        self.return_spare(channel);
        Ok(())
    }

    /// A channel that holds nothing, for taking a permit: an idle one, or a new one.
    pub(super) async fn permit_channel(&self) -> Result<Channel, lapin::Error> {
        self.idle_or_new(&self.permit_channels).await
    }

    /// Keep a channel that holds nothing any more for the next permit; past
    /// [`IDLE_PERMIT_CHANNELS`] idle ones, dropping it closes it.
    pub(super) fn keep_permit_channel(&self, channel: Channel) {
        if channel.status().connected() {
            keep(&self.permit_channels, channel, IDLE_PERMIT_CHANNELS);
        }
    }

    /// A connected channel of `idle`, or a new one.
    async fn idle_or_new(&self, idle: &Mutex<Vec<Channel>>) -> Result<Channel, lapin::Error> {
        let idle = idle.lock().expect("channel list poisoned").pop();
        match idle {
            Some(channel) if channel.status().connected() => Ok(channel),
            _ => self.connection.create_channel().await,
        }
    }

    /// An idle publisher channel, or a new one.
    async fn idle_publisher(&self) -> Result<Channel, lapin::Error> {
        let idle = self
            .publishers
            .lock()
            .expect("publisher list poisoned")
            .pop();
        match idle {
            Some(channel) if channel.status().connected() => Ok(channel),
            _ => confirm_channel(&self.connection).await,
        }
    }

    /// Keep a publisher channel with nothing outstanding on it.
    fn release_publisher(&self, channel: Channel) {
        self.publishers
            .lock()
            .expect("publisher list poisoned")
            .push(channel);
    }

    async fn spare_channel(&self) -> Result<Channel, lapin::Error> {
        self.idle_or_new(&self.spare).await
    }

    /// Keep a channel whose work succeeded for the next declaration; dropping the
    /// last handle of the others closes them.
    fn return_spare(&self, channel: Channel) {
        keep(&self.spare, channel, SPARE_CHANNELS);
    }
}

/// Keep `channel` in `idle` unless `idle` holds `most` already; dropping the last handle of
/// a channel closes it.
fn keep(idle: &Mutex<Vec<Channel>>, channel: Channel, most: usize) {
    let mut idle = idle.lock().expect("channel list poisoned");
    if idle.len() < most {
        idle.push(channel);
    }
}

async fn confirm_channel(connection: &Connection) -> Result<Channel, lapin::Error> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

/// What an `amqps://` connection trusts and presents beyond the public roots.
fn tls_config(files: &TlsFiles) -> OwnedTLSConfig {
    OwnedTLSConfig {
        identity: files
            .identity
            .as_ref()
            .map(|(cert, key)| OwnedIdentity::PKCS8 {
                pem: cert.clone(),
                key: key.0.clone().into_bytes(),
            }),
        cert_chain: files.ca.clone(),
    }
}
