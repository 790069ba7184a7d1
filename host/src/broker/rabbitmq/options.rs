//! How a [`RabbitMqBackend`](super::RabbitMqBackend) connects, waits and reconnects.

use std::time::Duration;

use rand::Rng;

use crate::telemetry::Telemetry;

/// Settings of a RabbitMQ backend. Every setting has a default that suits a worker:
///
/// | setting | default |
/// |---|---|
/// | [`connection_name`](Self::connection_name) | `jobhost` |
/// | [`outage_timeout`](Self::outage_timeout) | 30 s |
/// | [`reconnect_backoff`](Self::reconnect_backoff) | 100 ms doubling up to 5 s, jittered |
/// | [`publisher_channels`](Self::publisher_channels) | 64 |
/// | [`password`](Self::password) | the URL's |
/// | [`trust_certificates`](Self::trust_certificates) | the public roots only |
/// | [`telemetry`](Self::telemetry) | [`Telemetry::none`]: nobody watches |
/// | [`client_certificate`](Self::client_certificate) | none |
/// | [`hold_sweep_interval`](Self::hold_sweep_interval) | 10 s |
#[derive(Debug, Clone)]
pub struct RabbitMqOptions {
    pub(super) connection_name: String,
    pub(super) outage_timeout: Duration,
    pub(super) backoff: ReconnectBackoff,
    pub(super) publisher_channels: usize,
    pub(super) password: Option<Secret>,
    pub(super) tls: TlsFiles,
    pub(super) telemetry: Telemetry,
    pub(super) hold_sweep_interval: Duration,
    pub(super) inline_limit: Option<Duration>,
}

/// A value that never shows in `Debug` output.
#[derive(Clone)]
pub(super) struct Secret(pub(super) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The PEM contents an `amqps://` connection uses besides the public roots.
#[derive(Debug, Clone, Default)]
pub(super) struct TlsFiles {
    /// Certificates to trust.
    pub(super) ca: Option<String>,
    /// The client's certificate chain and its private key.
    pub(super) identity: Option<(Vec<u8>, Secret)>,
}

impl Default for RabbitMqOptions {
    fn default() -> Self {
        Self {
            connection_name: "jobhost".to_owned(),
            outage_timeout: Duration::from_secs(30),
            backoff: ReconnectBackoff::default(),
            publisher_channels: 64,
            password: None,
            tls: TlsFiles::default(),
            telemetry: Telemetry::none(),
            hold_sweep_interval: Duration::from_secs(10),
            // One consumer receives some 20,000-25,000 deliveries a second from RabbitMQ
            // (BENCHMARKS.md, "Short jobs in the consume loop"), so jobs averaging up to
            // 50 µs of a thread, 20,000 a second on one, about keep up with it in the consume
            // loop, where a task each would cost a wake of another thread, a seventh of a
            // no-op job's CPU. The time is wall time inside the job's polls, so it leaves
            // room for a no-op job (10-15 µs alone) on a thread that the broker preempts now
            // and then.
            inline_limit: Some(Duration::from_micros(50)),
        }
    }
}

impl RabbitMqOptions {
    /// The connection name the management UI shows (`rabbitmqctl list_connections
    /// client_properties`), so an operator can tell hosts apart.
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Where the backend emits its reconnections to the broker
    /// ([`Event::BrokerReconnected`](crate::telemetry::Event::BrokerReconnected)) and the
    /// overdue held messages its sweeper released
    /// ([`Event::OverdueReleased`](crate::telemetry::Event::OverdueReleased)).
    pub fn telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// How long a publish, a declaration or a new subscription waits for the broker,
    /// across reconnects, before it fails. Because a failed publish leaves the original
    /// delivery unacked, waiting out a short outage saves a redelivery; failing after a
    /// bound keeps a worker from hanging on a broker that is gone for good.
    pub fn outage_timeout(mut self, timeout: Duration) -> Self {
        self.outage_timeout = timeout;
        self
    }

    /// How often the host looks for messages that a hold queue kept past their delay and
    /// releases them onto their work queue itself (see the backend's module doc). Each
    /// look costs one `basic.get` per hold queue in use.
    pub fn hold_sweep_interval(mut self, interval: Duration) -> Self {
        // Bounded below, because a zero interval would make the sweeper spin.
        self.hold_sweep_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// How long a queue's jobs may keep a thread busy, on average, and still start in its
    /// consumer instead of a task of their own (default 50 µs; `None`: every job in a
    /// task). See [`Backend::inline_limit`](crate::broker::Backend::inline_limit).
    pub fn inline_limit(mut self, limit: Option<Duration>) -> Self {
        self.inline_limit = limit;
        self
    }

    /// The delays between reconnection attempts.
    pub fn reconnect_backoff(mut self, backoff: ReconnectBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How many batches of publishes may be in flight at once (at least 1). A batch is
    /// every publish waiting when a channel is free, pipelined on a confirm-mode channel of
    /// its own until its confirms arrive; channels are opened as needed and kept for reuse.
    /// While every channel is busy, publishes gather into the next batch, so a settling job
    /// never waits for more than one confirm round trip before its publish goes out.
    pub fn publisher_channels(mut self, channels: usize) -> Self {
        self.publisher_channels = channels.max(1);
        self
    }

    /// The password to log in with, replacing the URL's: so the URL, which shows in
    /// process lists and shell histories, need not carry it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Secret(password.into()));
        self
    }

    /// PEM certificates to trust for `amqps://` besides the public roots, e.g. the CA
    /// of a private broker. Needs the `tls` feature to take effect.
    pub fn trust_certificates(mut self, pem: impl Into<String>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// A client certificate chain and its private key (both PEM) to present over
    /// `amqps://`, for brokers that require one or log in with it (`EXTERNAL`). Needs the
    /// `tls` feature to take effect.
    pub fn client_certificate(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        // The key is PEM text; kept as a `Secret` so `Debug` never prints it.
        self.tls.identity = Some((
            cert_pem,
            Secret(String::from_utf8_lossy(&key_pem).into_owned()),
        ));
        self
    }
}

/// Exponential backoff between reconnection attempts: `min`, doubling per failed
/// attempt, capped at `max`, each delay drawn uniformly from its upper half so that
/// hosts restarted together do not reconnect in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectBackoff {
    /// The delay after the first failure.
    pub min: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for ReconnectBackoff {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

impl ReconnectBackoff {
    /// The delay before retry number `failures` (0-based).
    pub fn delay(&self, failures: u32) -> Duration {
        let ceiling = self
            .min
            .saturating_mul(2u32.saturating_pow(failures))
            .min(self.max);
        let floor = ceiling / 2;
        rand::rng().random_range(floor..=ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_minimum_and_stays_under_the_cap() {
        let backoff = ReconnectBackoff::default();
        for failures in 0..64 {
            let delay = backoff.delay(failures);
            let ceiling = (backoff.min * 2u32.saturating_pow(failures.min(20))).min(backoff.max);
            assert!(
                delay <= ceiling,
                "delay {delay:?} after {failures} failures exceeds {ceiling:?}"
            );
            assert!(
                delay >= ceiling / 2,
                "delay {delay:?} after {failures} failures is below half of {ceiling:?}"
            );
        }
    }

    #[test]
    fn at_least_one_publisher_channel_is_kept() {
        assert_eq!(
            RabbitMqOptions::default()
                .publisher_channels(0)
                .publisher_channels,
            1
        );
    }
}
