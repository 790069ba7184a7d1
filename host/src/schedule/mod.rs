//! Periodic jobs: the operator's schedules (`[schedules."NAME"]` of the grants file) and
//! the ones loaded plugins declare on their job types (see [`crate::job::Schedule`]), fired
//! by one [`Scheduler`] per host, exactly once per tick across the fleet.
//!
//! # Contract
//! - Every host runs a scheduler; the one that leads ([`Schedules::lead`]) fires. The
//!   others ask again every [`LEAD_RETRY`], so a leader that dies is replaced within about
//!   that once the broker has noticed (at once for a killed process, whose connection
//!   closes; a heartbeat timeout for a lost machine).
//! - A tick fires only behind its own lock ([`tick_lock`]), taken before the job is
//!   published and held for the tick's spacing times (`catch_up` + 1), plus [`ON_TIME`]:
//!   two schedulers that both believe they lead fire the tick once, whoever wins.
//! - The job of schedule S at tick T has the id [`tick_job_id`]`(S, T)`, the same on every
//!   host, with the schedule's payload, on the queue the loaded plugin that serves its job
//!   type declares. A schedule whose job type no loaded plugin serves lets its ticks go as
//!   missed, with a warning.
//! - A firing's job names its schedule in its envelope; whichever host settles it for good
//!   records how it ended beside the firing ([`Endings`]).
//! - After the publish is confirmed the firing is recorded ([`Schedules::record`]); a
//!   scheduler that takes the lead reads the last recorded tick and applies the schedule's
//!   `missed` policy to the ticks since ([`due`]). A schedule with no record starts at the
//!   first tick after the leader saw it.
//! - The schedules in force ([`in_force`]) are the grants file's, and each loaded plugin's
//!   under its job type's name unless the file has a schedule of that name, which then
//!   replaces it (or, with `enabled = false`, disables it).
//! - Schedules are read from the grants and plugins in force at each pass, so adding,
//!   changing, disabling or removing one (in the file, or by loading a plugin) takes effect
//!   at the next pass, without a restart. The ticks
//!   of a disabled schedule are not missed ticks: enabled again under the same leader, it
//!   starts from then (a leader that took over meanwhile knows only the last firing).
//!
//! Where "exactly once" can fail, each needing a host to die in a window of one broker
//! round trip: a leader killed after taking a tick's lock and before its publish is
//! confirmed loses that tick (the lock keeps anyone else from firing it); a publish
//! confirmed to the broker whose confirm the leader never received is sent again on the
//! next pass, with the same job id.
//!
//! # Per-pass algorithm
//! 1. Ask to lead. Not leading: forget what was known and wait [`LEAD_RETRY`].
//! 2. For each enabled schedule: the last tick known fired (from memory while leading,
//!    else the broker's record, else now); [`due`] says which ticks to fire and how many
//!    to let go.
//! 3. For each tick to fire: take its lock as this scheduler; held by another, it was
//!    fired; ours, publish the job, count it, record the firing.
//! 4. Sleep until the next tick of any schedule, or [`LEAD_RETRY`], whichever is first.

mod clock;
mod due;
mod endings;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::broker::{
    Backend, BrokerError, Firing, Schedules, Taken, UNIQUE_FOR_MAX, tick_holder, tick_job_id,
    tick_lock,
};
use crate::grants::{Grants, SharedGrants};
use crate::job::{Missed, Schedule};
use crate::producer::EnqueueOptions;
use crate::telemetry::{Event, Telemetry};
use crate::text::bounded;
use crate::worker::{Plugins, Registry};

pub use clock::Clock;
pub use due::{Due, ON_TIME, due};
pub use endings::Endings;

/// A schedule in force, and where it comes from.
#[derive(Debug, Clone)]
pub struct InForce {
    /// Its name: the grants file's section, or the job type a plugin declares it on.
    pub name: String,
    /// When it fires and what.
    pub schedule: Arc<Schedule>,
    /// Who set it.
    pub source: Source,
}

/// Who set a schedule in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The operator's grants file.
    File,
    /// The plugin of this name, on one of its job types.
    Plugin(String),
}

/// The schedules in force, by name: the grants file's, and each loaded plugin's under its
/// job type unless the file has a schedule of that name.
pub fn in_force(grants: &Grants, plugins: &Registry) -> Vec<InForce> {
    let mut schedules: BTreeMap<String, InForce> = BTreeMap::new();
    let mut set = |name: &str, schedule: &Arc<Schedule>, source: Source| {
        let (name, schedule) = (name.to_owned(), Arc::clone(schedule));
        schedules.insert(
            name.clone(),
            InForce {
                name,
                schedule,
                source,
            },
        );
    };
    for unit in plugins.units() {
        for (name, schedule) in &unit.manifest().schedules {
            set(name, schedule, Source::Plugin(unit.name().to_owned()));
        }
    }
    // The file's after the plugins', so that a schedule of the same name replaces theirs.
    for (name, schedule) in grants.schedules() {
        set(name, schedule, Source::File);
    }
    schedules.into_values().collect()
}

/// How often a scheduler that does not lead asks to, and a leader makes sure it still does.
pub const LEAD_RETRY: Duration = Duration::from_secs(1);

/// One host's scheduler. Cheap to build; [`Scheduler::run`] runs it.
#[derive(Debug)]
pub struct Scheduler<B> {
    backend: B,
    grants: SharedGrants,
    plugins: Plugins,
    telemetry: Telemetry,
    clock: Clock,
    host: String,
    candidate: Uuid,
}

impl<B: Backend + Schedules + Clone> Scheduler<B> {
    /// A scheduler on `backend` firing the schedules of `grants` into the queues of
    /// `plugins`, emitting its firings and missed ticks into `telemetry`, on the wall clock,
    /// named after this machine and process ([`this_host`]).
    pub fn new(backend: B, grants: SharedGrants, plugins: Plugins, telemetry: Telemetry) -> Self {
        Self {
            backend,
            grants,
            plugins,
            telemetry,
            clock: Clock::System,
            host: this_host(),
            candidate: Uuid::new_v4(),
        }
    }

    /// The same scheduler on `clock`.
    pub fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }

    /// The same scheduler, its firings recorded as fired by `host`.
    pub fn with_host(self, host: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            ..self
        }
    }

    /// Run until `shutdown`, then give up the lead. A round waiting on a broker that is
    /// down ends at `shutdown` too, so a host stops during an outage.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut known: HashMap<String, i64> = HashMap::new();
        let mut leading = false;
        loop {
            let wake = tokio::select! {
                () = shutdown.cancelled() => break,
                wake = self.round(&mut known, &mut leading) => wake,
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(self.clock.instant_at(wake)) => {}
            }
        }
        self.backend.resign(self.candidate).await;
    }

    /// Steps 1 to 3 of the [module doc](self); when to wake for the next round.
    async fn round(&self, known: &mut HashMap<String, i64>, leading: &mut bool) -> i64 {
        let now = self.clock.now_ms();
        let leads = match self.backend.lead(self.candidate).await {
            Ok(leads) => leads,
            Err(error) => {
                warn!(%error, "cannot ask the broker who leads the schedulers");
                false
            }
        };
        if leads != *leading {
            let said = if leads {
                "this host leads the schedulers"
            } else {
                "this host no longer leads the schedulers"
            };
            info!(host = %self.host, "{said}");
            *leading = leads;
        }
        let retry_ms = i64::try_from(LEAD_RETRY.as_millis()).unwrap_or(i64::MAX);
        let mut wake = now.saturating_add(retry_ms);
        if !leads {
            known.clear();
            return wake;
        }
        let schedules = in_force(&self.grants.current(), &self.plugins.current());
        for InForce { name, schedule, .. } in &schedules {
            let name = name.as_str();
            if !schedule.enabled {
                // Its ticks while disabled are not missed: enabled again, it starts from then.
                known.insert(name.to_owned(), self.clock.now_ms());
                continue;
            }
            self.pass(name, schedule, known).await;
            if let Some(next) = schedule.timing.next_after(self.clock.now_ms()) {
                wake = wake.min(next);
            }
        }
        wake
    }

    /// Fire what is due of `schedule` (steps 2 and 3 of the [module doc](self)).
    async fn pass(&self, name: &str, schedule: &Schedule, known: &mut HashMap<String, i64>) {
        let last = match known.get(name) {
            Some(last) => *last,
            None => match self.backend.firings(name).await {
                Ok(firings) => firings
                    .iter()
                    .map(|firing| firing.tick_ms)
                    .max()
                    .unwrap_or_else(|| self.clock.now_ms()),
                Err(error) => {
                    warn!(schedule = name, %error, "cannot read the schedule's last firing; trying again");
                    return;
                }
            },
        };
        known.insert(name.to_owned(), last);
        let due = due(&schedule.timing, schedule.missed, last, self.clock.now_ms());
        if let Some(through) = due.missed_through {
            self.let_go(name, due.missed, through, known);
        }
        for tick in due.fire {
            match self.fire(name, schedule, tick).await {
                Ok(()) => {
                    known.insert(name.to_owned(), tick);
                }
                Err(Unfired::NoPlugin) => {
                    warn!(schedule = name, job_type = %bounded(&schedule.job_type, 200), "no loaded plugin serves the schedule's job type: the tick is missed");
                    self.let_go(name, 1, tick, known);
                }
                Err(Unfired::Broker(error)) => {
                    warn!(schedule = name, tick_ms = tick, %error, "the schedule's tick was not fired; trying again");
                    return;
                }
            }
        }
    }

    /// Count `count` ticks through `through` as missed.
    fn let_go(&self, name: &str, count: u64, through: i64, known: &mut HashMap<String, i64>) {
        self.telemetry.emit(&Event::TicksMissed {
            schedule: name,
            count,
        });
        info!(
            schedule = name,
            missed = count,
            "ticks no host fired in time were let go"
        );
        known.insert(name.to_owned(), through);
    }

    /// Fire `schedule` at `tick` behind its lock (step 3 of the [module doc](self)).
    async fn fire(&self, name: &str, schedule: &Schedule, tick: i64) -> Result<(), Unfired> {
        let registry = self.plugins.current();
        let route = registry
            .route(&schedule.job_type)
            .ok_or(Unfired::NoPlugin)?;
        let lock = tick_lock(name, tick, lock_for(schedule, tick))?;
        let holder = tick_holder(self.candidate, name, tick);
        if let Taken::HeldBy(_) = self.backend.take_unique(&lock, holder).await? {
            debug!(
                schedule = name,
                tick_ms = tick,
                "another scheduler fired the tick"
            );
            return Ok(());
        }
        let job_id = tick_job_id(name, tick);
        let payload: Box<RawValue> = serde_json::value::to_raw_value(&schedule.payload)
            .expect("a JSON value always serializes: it is JSON already");
        let (mut envelope, _) = EnqueueOptions::new().job_id(job_id).first_attempt(
            &schedule.job_type,
            route.queue.name.as_str(),
            payload,
        )?;
        envelope.schedule = Some(name.to_owned());
        self.backend.declare(&route.queue).await?;
        self.backend.publish(&envelope, None).await?;
        self.telemetry
            .emit(&Event::ScheduleFired { schedule: name });
        info!(schedule = name, tick_ms = tick, %job_id, "schedule fired");
        let firing = Firing {
            tick_ms: tick,
            at_ms: self.clock.now_ms(),
            host: self.host.clone(),
            job_id,
            ended: None,
        };
        if let Err(error) = self.backend.record(name, &firing).await {
            warn!(schedule = name, %error, "a firing was not recorded: its lock keeps it from firing twice");
        }
        Ok(())
    }
}

/// Why a tick did not fire.
#[derive(Debug)]
enum Unfired {
    /// No loaded plugin serves the job type.
    NoPlugin,
    /// The broker failed; the next pass tries again.
    Broker(BrokerError),
}

impl From<BrokerError> for Unfired {
    fn from(error: BrokerError) -> Self {
        Self::Broker(error)
    }
}

/// How long the lock of `schedule`'s `tick` is held: as long as a scheduler may still
/// consider firing that tick, i.e. its spacing times (`catch_up` + 1) plus [`ON_TIME`], and
/// at most [`UNIQUE_FOR_MAX`].
fn lock_for(schedule: &Schedule, tick: i64) -> Duration {
    let spacing = schedule
        .timing
        .next_after(tick)
        .and_then(|next| u64::try_from(next - tick).ok())
        .map_or(UNIQUE_FOR_MAX, Duration::from_millis);
    let ticks = match schedule.missed {
        Missed::Skip => 1,
        Missed::CatchUp(n) => n + 1,
    };
    spacing
        .saturating_mul(ticks)
        .saturating_add(ON_TIME)
        .min(UNIQUE_FOR_MAX)
}

/// This host as a firing names it: the machine's name and the process id.
pub fn this_host() -> String {
    let node = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    bounded(&format!("{node}:{}", std::process::id()), 100).into_owned()
}

#[cfg(test)]
mod tests;
