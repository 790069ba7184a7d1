//! What the fleet's schedulers keep in the broker, on either backend ([`Schedules`]): who
//! leads, and each schedule's last firings.
//!
//! # Contract
//! - [`Schedules::lead`] answers whether `candidate` leads now, taking the lead when no
//!   one holds it. Leading is a hint, never the guard against a double firing: that is the
//!   per-tick [`UniqueLock`](super::UniqueLock) ([`tick_lock`]), so two schedulers that both
//!   believe they lead for a moment still fire a tick once.
//! - A lead ends with its holder: on RabbitMQ the token of [`LEADER_QUEUE`] goes back to
//!   the queue with the leader's connection (a killed host, a broker restart) and on to the
//!   next consumer; in memory a
//!   lead not renewed for [`MEMORY_LEASE`] ends, and [`Schedules::resign`] ends it at once.
//! - [`Schedules::record`] keeps a firing, [`Schedules::record_end`] how its job ended;
//!   [`Schedules::firings`] reads the last [`HISTORY`] of one schedule, oldest first, each
//!   joined with its ending. On RabbitMQ they live in a durable queue
//!   per schedule ([`history_queue_name`]) of persistent messages, so they survive host
//!   and broker restarts; in memory they live as long as the process.
//! - A record on the wire is hostile until [`Record::decode`] accepted it: at most
//!   [`FIRING_MAX_BYTES`] of JSON of a [`Firing`] or an [`Ended`]; a reader skips what is not one.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{BrokerError, UniqueLock};

/// The single-active-consumer queue whose token the leader of the fleet's schedulers holds.
pub const LEADER_QUEUE: &str = "jobhost.scheduler.leader";

/// How long a lead lasts in memory without being renewed.
pub const MEMORY_LEASE: Duration = Duration::from_secs(3);

/// How many firings of a schedule are kept.
pub const HISTORY: usize = 10;

/// The largest firing record a reader reads.
pub const FIRING_MAX_BYTES: usize = 1024;

/// The job type under which tick locks are named: no plugin's job type can take it,
/// because a tick lock's key is never a producer's.
const TICK_LOCK_TYPE: &str = "jobhost.schedule";

/// One firing of a schedule: the tick, the job it enqueued, who fired it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firing {
    /// The tick, in milliseconds since the Unix epoch.
    pub tick_ms: i64,
    /// When the job was enqueued, on the firing host's clock, in milliseconds since the
    /// Unix epoch.
    pub at_ms: i64,
    /// The host that fired it.
    pub host: String,
    /// The job it enqueued ([`tick_job_id`]).
    pub job_id: Uuid,
    /// How the job ended, once a host settled it for good (joined in by
    /// [`Schedules::firings`]; never part of the firing's own record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
}

/// How the job of a firing ended: recorded by the host that settled it for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// The firing's job.
    pub job_id: Uuid,
    /// `completed`, `dead-lettered`, `expired` or `cancelled`.
    pub outcome: String,
    /// The attempt that ended it.
    pub attempt: u32,
    /// When, on that host's clock, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The host that settled it.
    pub host: String,
}

/// `firings` with each one's ending among `endings`, if any (the latest of its job's).
pub(super) fn joined(mut firings: Vec<Firing>, endings: &[Ended]) -> Vec<Firing> {
    for firing in &mut firings {
        firing.ended = endings
            .iter()
            .rev()
            .find(|ended| ended.job_id == firing.job_id)
            .cloned();
    }
    firings
}

/// A record of a schedule's history in the broker: a [`Firing`] or an [`Ended`], as JSON.
pub trait Record: Serialize + serde::de::DeserializeOwned {
    /// The record's JSON body.
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record of plain fields always serializes")
    }

    /// The record in `body`, if it is one: at most [`FIRING_MAX_BYTES`] of its JSON.
    fn decode(body: &[u8]) -> Option<Self> {
        if body.len() > FIRING_MAX_BYTES {
            return None;
        }
        serde_json::from_slice(body).ok()
    }
}

impl Record for Firing {}

impl Record for Ended {}

/// The durable queue that keeps `schedule`'s last firings on RabbitMQ.
pub fn history_queue_name(schedule: &str) -> String {
    format!("jobhost.schedule.{schedule}.fired")
}

/// The durable queue that keeps how `schedule`'s last firings' jobs ended, on RabbitMQ.
pub fn endings_queue_name(schedule: &str) -> String {
    format!("jobhost.schedule.{schedule}.ended")
}

/// The id of the job that the firing of `schedule` at `tick_ms` enqueues: the same on
/// every host (UUID v5), so a ledger can count firings per tick by job id.
pub fn tick_job_id(schedule: &str, tick_ms: i64) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, tick_key(schedule, tick_ms).as_bytes())
}

/// The lock a scheduler takes before it fires `schedule` at `tick_ms`, held `for_`.
pub fn tick_lock(schedule: &str, tick_ms: i64, for_: Duration) -> Result<UniqueLock, BrokerError> {
    UniqueLock::new(TICK_LOCK_TYPE, &tick_key(schedule, tick_ms), for_)
}

/// Who holds a tick lock for the scheduler `candidate`: its own per tick, so its retry of
/// a take answers `Ours` and another scheduler's take answers `HeldBy`.
pub fn tick_holder(candidate: Uuid, schedule: &str, tick_ms: i64) -> Uuid {
    Uuid::new_v5(&candidate, tick_key(schedule, tick_ms).as_bytes())
}

fn tick_key(schedule: &str, tick_ms: i64) -> String {
    format!("{schedule}@{tick_ms}")
}

/// Leadership and firing history of the fleet's schedulers (see the [module doc](self)).
pub trait Schedules: Send + Sync + 'static {
    /// Whether `candidate` leads now; takes the lead when no one holds it.
    fn lead(&self, candidate: Uuid) -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// Give up the lead if `candidate` holds it.
    fn resign(&self, candidate: Uuid) -> impl Future<Output = ()> + Send;

    /// Keep `firing` among `schedule`'s last [`HISTORY`]. Returns once the broker has it.
    fn record(
        &self,
        schedule: &str,
        firing: &Firing,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Keep how the job of one of `schedule`'s firings ended, among its last [`HISTORY`].
    fn record_end(
        &self,
        schedule: &str,
        ended: &Ended,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// `schedule`'s last firings, oldest first, each with how its job ended when that is
    /// known.
    fn firings(
        &self,
        schedule: &str,
    ) -> impl Future<Output = Result<Vec<Firing>, BrokerError>> + Send;
}

impl<S: Schedules> Schedules for std::sync::Arc<S> {
    fn lead(&self, candidate: Uuid) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        (**self).lead(candidate)
    }

    fn resign(&self, candidate: Uuid) -> impl Future<Output = ()> + Send {
        (**self).resign(candidate)
    }

    fn record(
        &self,
        schedule: &str,
        firing: &Firing,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).record(schedule, firing)
    }

    fn record_end(
        &self,
        schedule: &str,
        ended: &Ended,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).record_end(schedule, ended)
    }

    fn firings(
        &self,
        schedule: &str,
    ) -> impl Future<Output = Result<Vec<Firing>, BrokerError>> + Send {
        (**self).firings(schedule)
    }
}
