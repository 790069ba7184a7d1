//! A [`Backend`] wrapper that times every delivery from the moment the worker pulls it to
//! its ack, and counts what the worker publishes, without touching the host.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobhost::broker::{Backend, BrokerError, Consumer, DeadLetterOut, Delivery, Permits, Tokens};
use jobhost::envelope::Envelope;
use jobhost::policy::HoldDelay;
use jobhost::trace::TraceContext;
use jobhost_sdk::QueueConfig;
use uuid::Uuid;

use crate::events::Events;
use crate::report::Samples;

/// What the worker did through a [`Metered`] backend.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    acks: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
    /// Delayed publishes, for the publish rate while retrying.
    delayed_publishes: Events,
    /// When each job id was last acked; only filled when asked for, because decoding
    /// every body would tax the throughput scenarios.
    acked_ids: Option<Mutex<HashMap<Uuid, Instant>>>,
}

impl Meter {
    /// A meter that also remembers which job ids were acked and when.
    pub(crate) fn tracking_ids() -> Self {
        Self {
            acked_ids: Some(Mutex::default()),
            ..Self::default()
        }
    }

    pub(crate) fn acks(&self) -> u64 {
        self.acks.load(Ordering::Acquire)
    }

    /// Delayed publishes per second between the first and the last of them.
    pub(crate) fn delayed_publish_rate(&self) -> Option<f64> {
        self.delayed_publishes.rate()
    }

    /// When `job_id` was last acked.
    pub(crate) fn acked_at(&self, job_id: Uuid) -> Option<Instant> {
        let ids = self.acked_ids.as_ref()?.lock().expect("meter lock");
        ids.get(&job_id).copied()
    }

    /// The pull-to-ack latencies so far.
    pub(crate) fn samples(&self) -> Samples {
        Samples::new(self.latencies.lock().expect("meter lock").clone())
    }

    /// Wait until at least `acks` deliveries were acked, or `deadline` passes.
    pub(crate) async fn wait_for_acks(&self, acks: u64, deadline: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        while self.acks() < acks {
            anyhow::ensure!(
                start.elapsed() < deadline,
                "only {} of {acks} deliveries were acked within {deadline:?}",
                self.acks()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    fn acked(&self, pulled: Instant, body: &[u8]) {
        let now = Instant::now();
        self.latencies
            .lock()
            .expect("meter lock")
            .push(now.duration_since(pulled));
        if let Some(ids) = &self.acked_ids
            && let Ok(envelope) = Envelope::decode(body)
        {
            ids.lock().expect("meter lock").insert(envelope.job_id, now);
        }
        self.acks.fetch_add(1, Ordering::Release);
    }

    fn published_delayed(&self) {
        self.delayed_publishes.record();
    }
}

/// `B` with every delivery timed and every publish counted; clonable whatever `B` is.
#[derive(Debug)]
pub(crate) struct Metered<B> {
    inner: Arc<B>,
    meter: Arc<Meter>,
}

impl<B> Clone for Metered<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            meter: Arc::clone(&self.meter),
        }
    }
}

impl<B> Metered<B> {
    pub(crate) fn new(inner: Arc<B>, meter: Arc<Meter>) -> Self {
        Self { inner, meter }
    }
}

impl<B: Backend> Backend for Metered<B> {
    type Consumer = MeteredConsumer<B::Consumer>;
    type Lease = B::Lease;

    async fn take_token(&self, tokens: &Tokens) -> Result<bool, BrokerError> {
        self.inner.take_token(tokens).await
    }

    async fn hold_tokens(&self, tokens: &Tokens, delay: Duration) -> Result<(), BrokerError> {
        self.inner.hold_tokens(tokens, delay).await
    }

    async fn take_permit(&self, permits: &Permits) -> Result<Option<B::Lease>, BrokerError> {
        self.inner.take_permit(permits).await
    }

    async fn declare(&self, queue: &QueueConfig) -> Result<(), BrokerError> {
        self.inner.declare(queue).await
    }

    async fn publish(
        &self,
        envelope: &Envelope,
        delay: Option<HoldDelay>,
    ) -> Result<(), BrokerError> {
        self.inner.publish(envelope, delay).await?;
        if delay.is_some() {
            self.meter.published_delayed();
        }
        Ok(())
    }

    async fn dead_letter(&self, letter: DeadLetterOut<'_>) -> Result<(), BrokerError> {
        self.inner.dead_letter(letter).await
    }

    async fn consume(&self, queue: &QueueConfig) -> Result<Self::Consumer, BrokerError> {
        Ok(MeteredConsumer {
            inner: self.inner.consume(queue).await?,
            meter: Arc::clone(&self.meter),
        })
    }

    fn inline_limit(&self) -> Option<Duration> {
        self.inner.inline_limit()
    }
}

/// A consumer stamping each delivery with the time it was pulled.
#[derive(Debug)]
pub(crate) struct MeteredConsumer<C> {
    inner: C,
    meter: Arc<Meter>,
}

impl<C: Consumer> Consumer for MeteredConsumer<C> {
    type Delivery = MeteredDelivery<C::Delivery>;

    async fn next(&mut self) -> Option<Self::Delivery> {
        let inner = self.inner.next().await?;
        Some(MeteredDelivery {
            inner,
            pulled: Instant::now(),
            meter: Arc::clone(&self.meter),
        })
    }

    async fn close(self) {
        self.inner.close().await;
    }
}

/// A delivery that reports its pull-to-ack time when acked.
#[derive(Debug)]
pub(crate) struct MeteredDelivery<D> {
    inner: D,
    pulled: Instant,
    meter: Arc<Meter>,
}

impl<D: Delivery> Delivery for MeteredDelivery<D> {
    fn body(&self) -> &[u8] {
        self.inner.body()
    }

    fn redelivered(&self) -> bool {
        self.inner.redelivered()
    }

    fn trace_context(&self) -> Option<TraceContext> {
        self.inner.trace_context()
    }

    async fn ack(self) -> Result<(), BrokerError> {
        let Self {
            inner,
            pulled,
            meter,
        } = self;
        // The body is gone once acked; the id is only read when tracked.
        let body = meter.acked_ids.is_some().then(|| inner.body().to_vec());
        inner.ack().await?;
        meter.acked(pulled, body.as_deref().unwrap_or_default());
        Ok(())
    }

    async fn requeue(self) -> Result<(), BrokerError> {
        self.inner.requeue().await
    }
}
