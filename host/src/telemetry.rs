//! What happens in a host, told once: components emit one [`Event`] per thing that
//! happened, and observers attached to the host's [`Telemetry`] do what they want with it.
//!
//! The worker, the plugin loader, the fleet's pause follower, the scheduler, the RabbitMQ
//! backend and the admin API each hold a [`Telemetry`] and know nothing of who watches;
//! the host (`jobhost run`, see [`crate::app`]) attaches the [`Metrics`](crate::metrics::Metrics)
//! that `GET /metrics` serves and the [`Activity`](crate::activity::Activity) the dashboard
//! shows. A test attaches what it asserts on.
//!
//! # The events
//!
//! | event | emitted by, when | [`Metrics`](crate::metrics::Metrics) | [`Activity`](crate::activity::Activity) |
//! |---|---|---|---|
//! | [`DeliveryStarted`](Event::DeliveryStarted) | the worker, for each delivery it pulls and starts | `jobhost_jobs_in_flight` up; `jobhost_redeliveries_total` when redelivered | the queue's `in_flight` up |
//! | [`DeliveryEnded`](Event::DeliveryEnded) | the worker's [`Delivering`] guard, when the delivery is dropped: settled, abandoned at shutdown, or its task panicked | `jobhost_jobs_in_flight` down | the queue's `in_flight` down |
//! | [`HandlerRan`](Event::HandlerRan) | the worker, when a handler returned | `jobhost_job_duration_seconds` | — |
//! | [`PublishFailed`](Event::PublishFailed) | the worker, when a publish that settles a delivery failed | `jobhost_publish_failures_total{kind}` | — |
//! | [`Settled`](Event::Settled) | the worker, once per settled delivery ([`SettledJob`]) | `jobhost_jobs_total{outcome}`, `jobhost_delivery_duration_seconds`, `jobhost_dead_letters_total{cause}`, `jobhost_jobs_throttled_total{reason}` | the queue's count of its outcome; a retried, expired, dead-lettered or cancelled job in the recent failures, with its reason |
//! | [`PluginChanged`](Event::PluginChanged) | the loader, for each sync of a plugin file ([`PluginChange`]) | `jobhost_plugin_loads_total{outcome}` when it loaded, replaced or refused a binary | the reload history, when it is news ([`PluginChange::is_news`]) |
//! | [`BrokerReconnected`](Event::BrokerReconnected) | the RabbitMQ backend, when a new connection replaced a lost one | `jobhost_broker_reconnects_total` | — |
//! | [`OverdueReleased`](Event::OverdueReleased) | the RabbitMQ backend's hold sweeper, when it released messages a hold queue kept past their delay | `jobhost_hold_overdue_released_total` | — |
//! | [`PauseLearnt`](Event::PauseLearnt) | the [`Fleet`](crate::worker::Fleet), each time it learns whether a queue is paused | `jobhost_queue_paused` | — |
//! | [`ScheduleFired`](Event::ScheduleFired) | the scheduler, when it enqueued a tick's job | `jobhost_schedule_firings_total` | — |
//! | [`TicksMissed`](Event::TicksMissed) | the scheduler, when it let ticks no host fired in time go | `jobhost_schedule_missed_ticks_total` | — |
//! | [`DuplicateRefused`](Event::DuplicateRefused) | the admin API, when an enqueue was refused as a duplicate of a unique job | `jobhost_enqueue_duplicates_total` | — |
//!
//! Two metrics are no events: `jobhost_instances_in_use` and `jobhost_hold_queue_messages`
//! are read at each scrape (the engine's pool, the broker's depths), because counting them
//! as they change would cost every job or every publish.
//!
//! The log is no observer: the worker, the loader and the others write their lines where
//! they decide, because those lines carry the job's span and the words of the moment.
//! The worker's periodic summary (`jobs settled since the last summary`) is that worker's
//! own tally, counted where it settles: it sums one worker's settlements, and a
//! [`Telemetry`] may be shared by more than one.
//!
//! # Contract
//! - Observers match [`Event`] exhaustively: a new event is a compile error in each of
//!   them until it is mapped, or ignored with a word why.
//! - [`Telemetry::none`] (also [`Telemetry::default`]) is a telemetry nobody watches, as
//!   tracing's no-op subscriber: what a test or a library user who attaches nothing gets.
//!   Nothing is counted anywhere; emitting costs an empty loop.
//! - Emitting allocates nothing: an event borrows what it tells, and the observers are a
//!   shared slice, called in the order they were attached, on the emitter's thread.
//!   Observers must be quick and must not panic (a [`DeliveryEnded`](Event::DeliveryEnded)
//!   may be emitted while a panic unwinds).
//! - Each [`DeliveryStarted`](Event::DeliveryStarted) is followed by exactly one
//!   [`DeliveryEnded`](Event::DeliveryEnded) for the same queue on the same telemetry,
//!   whatever ends the delivery, because the [`Delivering`] guard emits it on drop: gauges
//!   of deliveries in flight stay exact.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::job::{PluginChange, SettledJob};

/// One thing that happened in the host; see the [module doc](self) for who emits each and
/// who observes it.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A delivery from `queue` starts; `redelivered` when the broker marked it as
    /// delivered before. A [`DeliveryEnded`](Self::DeliveryEnded) follows on every path.
    DeliveryStarted {
        /// The queue it came from.
        queue: &'a Arc<str>,
        /// Whether the broker marked it redelivered.
        redelivered: bool,
    },
    /// A delivery from `queue` is over: settled, or dropped unsettled (abandoned at
    /// shutdown, its task panicked), in which case the broker redelivers it.
    DeliveryEnded {
        /// The queue it came from.
        queue: &'a Arc<str>,
    },
    /// A handler of `job_type` (a loaded manifest's) ran for `elapsed`.
    HandlerRan {
        /// The job type of its route.
        job_type: &'a Arc<str>,
        /// How long the handler ran.
        elapsed: Duration,
    },
    /// Publishing what settles a delivery of `queue` failed; `permanent` when it never can
    /// succeed.
    PublishFailed {
        /// The queue the delivery came from.
        queue: &'a Arc<str>,
        /// Whether the broker refused it for good.
        permanent: bool,
    },
    /// A delivery was settled.
    Settled(SettledJob<'a>),
    /// A sync of the plugin file `file` did `change`.
    PluginChanged {
        /// The plugin file, as the loader keys it.
        file: &'a str,
        /// What the sync did.
        change: &'a PluginChange,
    },
    /// The broker connection was lost and a new one is up (RabbitMQ).
    BrokerReconnected,
    /// The host released `count` messages that a hold queue of `queue` kept past their
    /// delay onto `queue` itself (RabbitMQ).
    OverdueReleased {
        /// The work queue they were released onto.
        queue: &'a str,
        /// How many.
        count: u64,
    },
    /// This host learnt whether `queue` is paused: the pause it now follows.
    PauseLearnt {
        /// The queue asked about.
        queue: &'a str,
        /// Its pause.
        paused: bool,
    },
    /// This host fired a tick of `schedule`: it enqueued the tick's job.
    ScheduleFired {
        /// The schedule, a section of the grants file.
        schedule: &'a str,
    },
    /// `count` ticks of `schedule` no host fired in time were let go, as its `missed`
    /// policy says.
    TicksMissed {
        /// The schedule, a section of the grants file.
        schedule: &'a str,
        /// How many ticks.
        count: u64,
    },
    /// An enqueue of `job_type`, a job type a loaded manifest declares, was refused as a
    /// duplicate of a unique job that was queued, held or running.
    DuplicateRefused {
        /// The job type enqueued.
        job_type: &'a str,
    },
}

/// Something attached to a [`Telemetry`] that watches its events.
pub trait Observer: Send + Sync {
    /// `event` happened. Quick, and never panicking: see the [module doc](self).
    fn observe(&self, event: &Event<'_>);
}

impl<O: Observer + ?Sized> Observer for Arc<O> {
    fn observe(&self, event: &Event<'_>) {
        (**self).observe(event);
    }
}

/// Where a component emits its events: the observers attached when it was built. Cheap to
/// clone (an `Arc`); clones share the observers.
#[derive(Clone, Default)]
pub struct Telemetry {
    observers: Arc<[Arc<dyn Observer>]>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl Telemetry {
    /// A telemetry nobody watches: events go nowhere, nothing is counted (see the
    /// [module doc](self)).
    pub fn none() -> Self {
        Self::default()
    }

    /// A telemetry to attach observers to.
    pub fn builder() -> TelemetryBuilder {
        TelemetryBuilder::default()
    }

    /// A telemetry with this one's observers and `observer` after them: for a component
    /// whose events one more observer watches.
    pub fn with(&self, observer: impl Observer + 'static) -> Self {
        let mut observers: Vec<Arc<dyn Observer>> = self.observers.iter().cloned().collect();
        observers.push(Arc::new(observer));
        Self {
            observers: observers.into(),
        }
    }

    /// Hand `event` to every observer, in the order they were attached.
    #[inline]
    pub fn emit(&self, event: &Event<'_>) {
        for observer in self.observers.iter() {
            observer.observe(event);
        }
    }

    /// A delivery from `queue` starts: emit [`Event::DeliveryStarted`] now, and
    /// [`Event::DeliveryEnded`] when the guard drops, whatever drops it.
    pub fn delivering(&self, queue: &Arc<str>, redelivered: bool) -> Delivering<'_> {
        self.emit(&Event::DeliveryStarted { queue, redelivered });
        Delivering {
            telemetry: self,
            queue: Arc::clone(queue),
        }
    }
}

/// Attaches observers to a [`Telemetry`].
#[derive(Default)]
pub struct TelemetryBuilder {
    observers: Vec<Arc<dyn Observer>>,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl TelemetryBuilder {
    /// Attach `observer`: it sees every event emitted from now on, after the observers
    /// attached before it.
    #[must_use]
    pub fn attach(mut self, observer: impl Observer + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// The telemetry with the attached observers.
    pub fn build(self) -> Telemetry {
        Telemetry {
            observers: self.observers.into(),
        }
    }
}

/// A delivery in flight: made by [`Telemetry::delivering`], it emits
/// [`Event::DeliveryEnded`] when dropped, also when the delivery is abandoned unsettled or
/// its task panics.
#[must_use = "the delivery ends when the guard drops"]
pub struct Delivering<'t> {
    telemetry: &'t Telemetry,
    queue: Arc<str>,
}

impl fmt::Debug for Delivering<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivering")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<'t> Delivering<'t> {
    /// The queue the delivery came from.
    pub fn queue(&self) -> &Arc<str> {
        &self.queue
    }

    /// Where the delivery's events go.
    pub fn telemetry(&self) -> &'t Telemetry {
        self.telemetry
    }
}

impl Drop for Delivering<'_> {
    fn drop(&mut self) {
        self.telemetry
            .emit(&Event::DeliveryEnded { queue: &self.queue });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records what it saw, as `name:queue` strings.
    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl Observer for Seen {
        fn observe(&self, event: &Event<'_>) {
            let seen = match event {
                Event::DeliveryStarted { queue, .. } => format!("started:{queue}"),
                Event::DeliveryEnded { queue } => format!("ended:{queue}"),
                other => format!("{other:?}"),
            };
            self.0.lock().expect("not poisoned").push(seen);
        }
    }

    #[test]
    fn each_observer_sees_each_event_in_the_order_attached() {
        let (first, second) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
        let telemetry = Telemetry::builder()
            .attach(Arc::clone(&first))
            .attach(Arc::clone(&second))
            .build();
        telemetry.emit(&Event::BrokerReconnected);
        telemetry
            .clone()
            .emit(&Event::ScheduleFired { schedule: "s" });
        for seen in [first, second] {
            let seen = seen.0.lock().expect("not poisoned").clone();
            assert_eq!(seen.len(), 2);
            assert_eq!(seen[0], "BrokerReconnected");
        }
        Telemetry::none().emit(&Event::BrokerReconnected);
    }

    #[test]
    fn a_delivery_ends_once_whatever_drops_it_even_a_panic() {
        let seen = Arc::new(Seen::default());
        let telemetry = Telemetry::builder().attach(Arc::clone(&seen)).build();
        let queue: Arc<str> = "q".into();
        drop(telemetry.delivering(&queue, false));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _delivering = telemetry.delivering(&queue, true);
            panic!("the delivery's task panics");
        }));
        assert!(panicked.is_err());
        let seen = seen.0.lock().expect("not poisoned").clone();
        assert_eq!(seen, ["started:q", "ended:q", "started:q", "ended:q"]);
    }
}
