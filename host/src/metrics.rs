//! The host's metrics, served as Prometheus text on the admin API's `GET /metrics`.
//!
//! One [`Metrics`] per host, cheap to clone (an `Arc` inside): an [`Observer`] attached
//! to the host's [`Telemetry`](crate::telemetry::Telemetry), counting the events the
//! worker, the loader and the others emit (see [`crate::telemetry`] for which event moves
//! which family), and read by the admin API at each scrape. Built on `prometheus-client`,
//! which encodes the families; nothing here formats text by hand.
//!
//! # Metrics
//!
//! | name | type | labels |
//! |---|---|---|
//! | `jobhost_jobs_total` | counter | `queue`, `job_type`, `outcome` (`completed`, `retried`, `deferred`, `expired`, `dead_lettered`, `cancelled`, `throttled`) |
//! | `jobhost_jobs_throttled_total` | counter | `queue`, `reason` (`concurrency`, `rate`): jobs held back by a fleet-wide limit, which wait in a hold queue without spending an attempt |
//! | `jobhost_dead_letters_total` | counter | `queue`, `cause` (see [`DeadCause::label`](crate::job::DeadCause::label)); expired and cancelled jobs are not counted here, though their messages go to the dead-letter queue too |
//! | `jobhost_job_duration_seconds` | histogram | `job_type`: the handler's run time |
//! | `jobhost_delivery_duration_seconds` | histogram | `job_type`: a whole delivery, from its pull to its settlement |
//! | `jobhost_jobs_in_flight` | gauge | none: deliveries being run or settled now |
//! | `jobhost_redeliveries_total` | counter | `queue`: deliveries the broker marked redelivered |
//! | `jobhost_publish_failures_total` | counter | `queue`, `kind` (`permanent`, `transient`) |
//! | `jobhost_broker_reconnects_total` | counter | none: new connections after a lost one (RabbitMQ) |
//! | `jobhost_plugin_loads_total` | counter | `outcome` (`loaded`, `replaced`, `refused`) |
//! | `jobhost_instances_in_use` | gauge | none: pool slots holding a job's or a load's instance |
//! | `jobhost_hold_queue_messages` | gauge | `queue`: messages in the work queue's hold queues, set by the admin API at each scrape |
//! | `jobhost_hold_overdue_released_total` | counter | `queue`: held messages the broker kept past their delay, which the host released itself (RabbitMQ) |
//! | `jobhost_queue_paused` | gauge | `queue`: 1 while the fleet has the queue paused, as this host last learnt it, else 0 |
//! | `jobhost_enqueue_duplicates_total` | counter | `job_type`: enqueues through the admin API refused because a job with the same unique key was queued, held or running |
//! | `jobhost_schedule_firings_total` | counter | `schedule`: ticks this host fired (enqueued the tick's job) while it led the schedulers |
//! | `jobhost_schedule_missed_ticks_total` | counter | `schedule`: ticks no host fired in time that the schedule's `missed` policy let go |
//!
//! # Bounded labels
//! `queue` is a queue the worker consumes, which a loaded manifest declared. `job_type` is
//! a job type of a loaded manifest, from when its route is found; a delivery
//! dead-lettered before that (a job type no loaded manifest declares, which a producer may
//! send, a message that is not an envelope, a payload too large, a poison message) counts
//! as [`OTHER_JOB_TYPE`]. `schedule` is a schedule of the grants file. `cause` and the other labels are closed sets. The series of a
//! plugin that was unloaded stay, as Prometheus counters must. The `queue` of
//! `jobhost_hold_queue_messages` is a queue of a loaded manifest too: the admin API sets
//! it for those at each scrape (see [`crate::admin::dashboard`] for the cost).
//!
//! # No allocation per job
//! The labels of the families a job moves are the `Arc<str>`s its events carry, shared:
//! counting a job clones pointers and allocates nothing of its own.

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::job::{PluginChange, SettledJob};
use crate::telemetry::{Event, Observer};

/// The `Content-Type` of [`Metrics::encode`]'s text: Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `job_type` label of every job type no loaded manifest declares, and of deliveries
/// dead-lettered before their route was found.
pub use crate::job::OTHER_JOB_TYPE;

/// The host's metric families; see the [module doc](self) for the list.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl fmt::Debug for Metrics {
    /// Short, because the configurations that hold metrics are logged, and a registry's
    /// every series is not what such a line should show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    jobs: Family<JobLabels, Counter>,
    dead_letters: Family<DeadLetterLabels, Counter>,
    throttled: Family<ThrottleLabels, Counter>,
    job_duration: Family<JobTypeLabels, Histogram, fn() -> Histogram>,
    delivery_duration: Family<JobTypeLabels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    redeliveries: Family<QueueLabels, Counter>,
    publish_failures: Family<PublishLabels, Counter>,
    plugin_loads: Family<LoadLabels, Counter>,
    reconnects: Counter,
    hold_messages: Family<QueueLabels, Gauge>,
    overdue_released: Family<QueueLabels, Counter>,
    paused: Family<QueueLabels, Gauge>,
    duplicates: Family<JobTypeLabels, Counter>,
    schedule_firings: Family<ScheduleLabels, Counter>,
    schedule_missed: Family<ScheduleLabels, Counter>,
    pool: Arc<InstancePool>,
}

impl Default for Inner {
    fn default() -> Self {
        let mut inner = Self {
            registry: Registry::default(),
            jobs: Family::default(),
            dead_letters: Family::default(),
            throttled: Family::default(),
            job_duration: Family::new_with_constructor(duration_histogram),
            delivery_duration: Family::new_with_constructor(duration_histogram),
            in_flight: Gauge::default(),
            redeliveries: Family::default(),
            publish_failures: Family::default(),
            plugin_loads: Family::default(),
            reconnects: Counter::default(),
            hold_messages: Family::default(),
            overdue_released: Family::default(),
            paused: Family::default(),
            duplicates: Family::default(),
            schedule_firings: Family::default(),
            schedule_missed: Family::default(),
            pool: Arc::default(),
        };
        inner.register();
        inner
    }
}

impl Inner {
    fn register(&mut self) {
        /// Register each family under its name and help text.
        macro_rules! register {
            ($($family:ident: $name:literal, $help:literal;)*) => {
                $(self.registry.register($name, $help, self.$family.clone());)*
            };
        }
        register! {
            jobs: "jobhost_jobs", "Jobs settled, by queue, job type and outcome";
            dead_letters: "jobhost_dead_letters", "Messages dead-lettered, by queue and cause";
            throttled: "jobhost_jobs_throttled", "Jobs held back by a fleet-wide limit without spending an attempt, by queue and reason";
            job_duration: "jobhost_job_duration_seconds", "How long handlers ran, by job type";
            delivery_duration: "jobhost_delivery_duration_seconds", "How long whole deliveries took, from pull to settlement, by job type";
            in_flight: "jobhost_jobs_in_flight", "Deliveries being run or settled now";
            redeliveries: "jobhost_redeliveries", "Deliveries the broker marked as redelivered, by queue";
            publish_failures: "jobhost_publish_failures", "Settlement publishes that failed, by queue and kind";
            plugin_loads: "jobhost_plugin_loads", "Plugin files loaded, replaced or refused";
            reconnects: "jobhost_broker_reconnects", "New broker connections after a lost one";
            hold_messages: "jobhost_hold_queue_messages", "Messages waiting in the hold queues of a work queue (retries and deferrals), as the broker counted them at the scrape";
            overdue_released: "jobhost_hold_overdue_released", "Held messages the broker kept past their delay, which the host took out of the hold queue and released onto the work queue itself, by work queue";
            paused: "jobhost_queue_paused", "1 while the fleet has a queue paused (the host does not consume it), else 0";
            duplicates: "jobhost_enqueue_duplicates", "Enqueues refused because a job with the same unique key was queued, held or running, by job type";
            schedule_firings: "jobhost_schedule_firings", "Ticks of a schedule this host fired, by schedule";
            schedule_missed: "jobhost_schedule_missed_ticks", "Ticks of a schedule no host fired in time and its missed policy let go, by schedule";
        }
        self.registry
            .register_collector(Box::new(self.pool.clone()));
    }
}

/// Handler and delivery durations: 1 ms to about 150 s, each bucket 2.5 times the last.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 14))
}

impl Metrics {
    /// Fresh metrics, every counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every metric in Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.inner.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Report what `in_use` reads (the engine's pool slots taken, `Engine::instances_in_use`)
    /// as `jobhost_instances_in_use` at every scrape; only the first reader given is kept,
    /// because a host has one engine. A reader, not the engine, so the metrics need not
    /// know the plugin layer.
    pub fn watch_pool(&self, in_use: impl Fn() -> usize + Send + Sync + 'static) {
        // Ignoring a second reader is the documented contract.
        let _ = self.inner.pool.0.set(Box::new(in_use));
    }

    /// `held` messages wait in the hold queues of `queue` now.
    pub fn hold_queue_messages(&self, queue: &str, held: u64) {
        let held = i64::try_from(held).unwrap_or(i64::MAX);
        let gauge = self.inner.hold_messages.get_or_create(&queue_labels(queue));
        gauge.set(held);
    }
}

impl Observer for Metrics {
    fn observe(&self, event: &Event<'_>) {
        let inner = &*self.inner;
        match *event {
            Event::DeliveryStarted { queue, redelivered } => {
                inner.in_flight.inc();
                if redelivered {
                    inner.redeliveries.get_or_create(&queue_labels(queue)).inc();
                }
            }
            Event::DeliveryEnded { .. } => {
                inner.in_flight.dec();
            }
            Event::HandlerRan { job_type, elapsed } => {
                let histogram = inner.job_duration.get_or_create(&job_type_labels(job_type));
                histogram.observe(elapsed.as_secs_f64());
            }
            Event::PublishFailed { queue, permanent } => inner.publish_failed(queue, permanent),
            Event::Settled(job) => inner.settled(&job),
            Event::PluginChanged { change, .. } => inner.plugin_changed(change),
            Event::BrokerReconnected => {
                inner.reconnects.inc();
            }
            Event::OverdueReleased { queue, count } => {
                let released = inner.overdue_released.get_or_create(&queue_labels(queue));
                released.inc_by(count);
            }
            Event::PauseLearnt { queue, paused } => {
                let gauge = inner.paused.get_or_create(&queue_labels(queue));
                gauge.set(i64::from(paused));
            }
            Event::ScheduleFired { schedule } => {
                inner
                    .schedule_firings
                    .get_or_create(&schedule_labels(schedule))
                    .inc();
            }
            Event::TicksMissed { schedule, count } => {
                let missed = inner
                    .schedule_missed
                    .get_or_create(&schedule_labels(schedule));
                missed.inc_by(count);
            }
            Event::DuplicateRefused { job_type } => {
                inner
                    .duplicates
                    .get_or_create(&job_type_labels(job_type))
                    .inc();
            }
        }
    }
}

/// The labels of `queue`: a clone of a shared name, or a copy of a borrowed one.
fn queue_labels(queue: impl Into<Label>) -> QueueLabels {
    QueueLabels {
        queue: queue.into().0,
    }
}

fn job_type_labels(job_type: impl Into<Label>) -> JobTypeLabels {
    JobTypeLabels {
        job_type: job_type.into().0,
    }
}

fn schedule_labels(schedule: &str) -> ScheduleLabels {
    ScheduleLabels {
        schedule: schedule.into(),
    }
}

/// A label value: an event's shared `Arc<str>` cloned (no allocation, as on every job's
/// path), or a borrowed `&str` copied (rare events).
struct Label(Arc<str>);

impl From<&Arc<str>> for Label {
    fn from(shared: &Arc<str>) -> Self {
        Self(Arc::clone(shared))
    }
}

impl From<&str> for Label {
    fn from(borrowed: &str) -> Self {
        Self(borrowed.into())
    }
}

impl Inner {
    /// Count a settled delivery: its outcome, its duration, its dead-letter cause or its
    /// throttle.
    fn settled(&self, job: &SettledJob<'_>) {
        let labels = JobLabels {
            queue: job.queue.clone(),
            job_type: job.series_job_type.clone(),
            outcome: job.settled.label(),
        };
        self.jobs.get_or_create(&labels).inc();
        let histogram = self
            .delivery_duration
            .get_or_create(&job_type_labels(job.series_job_type));
        histogram.observe(job.elapsed.as_secs_f64());
        if let Some(cause) = job.settled.dead_cause() {
            let labels = DeadLetterLabels {
                queue: job.queue.clone(),
                cause: cause.label(),
            };
            self.dead_letters.get_or_create(&labels).inc();
        }
        if let Some(throttle) = job.settled.throttle() {
            let labels = ThrottleLabels {
                queue: job.queue.clone(),
                reason: throttle.label(),
            };
            self.throttled.get_or_create(&labels).inc();
        }
    }

    /// Count a publish that failed.
    fn publish_failed(&self, queue: &Arc<str>, permanent: bool) {
        let kind = if permanent {
            PublishFailure::Permanent
        } else {
            PublishFailure::Transient
        };
        let labels = PublishLabels {
            queue: queue.clone(),
            kind,
        };
        self.publish_failures.get_or_create(&labels).inc();
    }

    /// Count a sync that loaded, replaced or refused a binary.
    fn plugin_changed(&self, change: &PluginChange) {
        if let Some(outcome) = change.load_outcome() {
            let labels = LoadLabels { outcome };
            self.plugin_loads.get_or_create(&labels).inc();
        }
    }
}

/// Whether a failed publish can ever succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PublishFailure {
    Permanent,
    Transient,
}

/// Label values that are names of a closed set.
macro_rules! label_value {
    ($($ty:ty => |$v:ident| $name:expr;)*) => {$(
        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
                let $v = *self;
                EncodeLabelValue::encode(&$name, encoder)
            }
        }
    )*};
}

label_value! {
    PublishFailure => |k| match k {
        PublishFailure::Permanent => "permanent",
        PublishFailure::Transient => "transient",
    };
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct JobLabels {
    queue: Arc<str>,
    job_type: Arc<str>,
    /// [`Settled::label`](crate::job::Settled::label).
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DeadLetterLabels {
    queue: Arc<str>,
    /// [`DeadCause::label`](crate::job::DeadCause::label).
    cause: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ThrottleLabels {
    queue: Arc<str>,
    /// [`Throttle::label`](crate::job::Throttle::label).
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct JobTypeLabels {
    job_type: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ScheduleLabels {
    schedule: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    queue: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PublishLabels {
    queue: Arc<str>,
    kind: PublishFailure,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LoadLabels {
    /// [`PluginChange::load_outcome`].
    outcome: &'static str,
}

/// `jobhost_instances_in_use`, read from the engine at each scrape, because counting it
/// per job would put two more atomic writes on every job's path.
#[derive(Default)]
struct InstancePool(OnceLock<Box<dyn Fn() -> usize + Send + Sync>>);

impl fmt::Debug for InstancePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstancePool")
            .field("watched", &self.0.get().is_some())
            .finish()
    }
}

impl Collector for InstancePool {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(in_use) = self.0.get() else {
            return Ok(());
        };
        let in_use = i64::try_from(in_use()).unwrap_or(i64::MAX);
        let gauge = ConstGauge::new(in_use);
        let metric = encoder.encode_descriptor(
            "jobhost_instances_in_use",
            "Pool slots holding a job's or a load's instance.",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

#[cfg(test)]
impl Metrics {
    /// The value of `series` (`name{labels}` as scraped) in a scrape now.
    pub(crate) fn sample(&self, series: &str) -> Option<f64> {
        self.encode().lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.parse().ok()
        })
    }

    /// A telemetry these metrics alone watch.
    pub(crate) fn telemetry(&self) -> crate::telemetry::Telemetry {
        crate::telemetry::Telemetry::builder()
            .attach(self.clone())
            .build()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::job::{DeadCause, Settled, Throttle};

    #[test]
    fn a_scrape_names_every_family_with_its_labels() {
        let metrics = Metrics::new();
        let telemetry = metrics.telemetry();
        let (queue, job_type): (Arc<str>, Arc<str>) = ("q".into(), "t".into());
        for (settled, millis) in [
            (Settled::DeadLettered(DeadCause::Fatal("no".into())), 3),
            (Settled::Throttled(Throttle::Concurrency), 1),
        ] {
            telemetry.emit(&Event::Settled(SettledJob {
                queue: &queue,
                series_job_type: &job_type,
                job: None,
                settled: &settled,
                failure: None,
                elapsed: Duration::from_millis(millis),
            }));
        }
        let refused = PluginChange::Refused {
            cause: "bad".into(),
        };
        for event in [
            Event::HandlerRan {
                job_type: &job_type,
                elapsed: Duration::from_millis(2),
            },
            Event::PublishFailed {
                queue: &queue,
                permanent: true,
            },
            Event::PluginChanged {
                file: "a.wasm",
                change: &refused,
            },
            Event::BrokerReconnected,
            Event::OverdueReleased {
                queue: "q",
                count: 2,
            },
            Event::PauseLearnt {
                queue: "q",
                paused: true,
            },
            Event::ScheduleFired { schedule: "s" },
            Event::TicksMissed {
                schedule: "s",
                count: 3,
            },
            Event::DuplicateRefused { job_type: "t" },
        ] {
            telemetry.emit(&event);
        }
        let delivering = telemetry.delivering(&queue, true);
        let text = metrics.encode();
        drop(delivering);
        for line in [
            r#"jobhost_jobs_total{queue="q",job_type="t",outcome="dead_lettered"} 1"#,
            r#"jobhost_dead_letters_total{queue="q",cause="fatal"} 1"#,
            r#"jobhost_jobs_total{queue="q",job_type="t",outcome="throttled"} 1"#,
            r#"jobhost_jobs_throttled_total{queue="q",reason="concurrency"} 1"#,
            r#"jobhost_delivery_duration_seconds_count{job_type="t"} 2"#,
            r#"jobhost_job_duration_seconds_count{job_type="t"} 1"#,
            r#"jobhost_publish_failures_total{queue="q",kind="permanent"} 1"#,
            r#"jobhost_plugin_loads_total{outcome="refused"} 1"#,
            "jobhost_broker_reconnects_total 1",
            r#"jobhost_hold_overdue_released_total{queue="q"} 2"#,
            r#"jobhost_queue_paused{queue="q"} 1"#,
            r#"jobhost_schedule_firings_total{schedule="s"} 1"#,
            r#"jobhost_schedule_missed_ticks_total{schedule="s"} 3"#,
            r#"jobhost_enqueue_duplicates_total{job_type="t"} 1"#,
            r#"jobhost_redeliveries_total{queue="q"} 1"#,
            "jobhost_jobs_in_flight 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "the scrape has `{line}`:\n{text}"
            );
        }
        assert_eq!(
            metrics.sample("jobhost_jobs_in_flight"),
            Some(0.0),
            "a dropped guard leaves the gauge"
        );
    }
}
