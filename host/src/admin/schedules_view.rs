//! What `GET /schedules` shows of each schedule in force (the grants file's and the ones
//! plugins declare): who set it, its timing, its next tick, and its last firings as the
//! broker keeps them (when, which host, which job).

use serde::{Deserialize, Serialize};

use crate::broker::Firing;
use crate::job::{Missed, Schedule, Timing};

/// One schedule, as `GET /schedules` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleView {
    /// Its name: the grants file's section, or the job type a plugin declares it on.
    pub name: String,
    /// Who set it: `[schedules."NAME"] in jobhost.toml`, or `plugin NAME`.
    #[serde(default)]
    pub from: String,
    /// The job type each firing enqueues.
    pub job_type: String,
    /// Whether it fires.
    pub enabled: bool,
    /// Its cron expression, if it has one.
    pub cron: Option<String>,
    /// The time zone of its cron expression.
    pub tz: Option<String>,
    /// Its period, if it has one.
    pub every_ms: Option<u64>,
    /// `skip`, or `catch_up N`.
    pub missed: String,
    /// Its next tick, in milliseconds since the Unix epoch; none when disabled or when its
    /// cron expression never matches again.
    pub next_ms: Option<i64>,
    /// Its last firings, newest first, each with how its job ended once that is known.
    pub firings: Vec<Firing>,
}

impl ScheduleView {
    /// The view of `schedule`, called `name` and set as `from` says, at `now_ms`, with its
    /// last `firings` (oldest first, as the broker keeps them).
    pub fn of(
        name: &str,
        from: String,
        schedule: &Schedule,
        now_ms: i64,
        mut firings: Vec<Firing>,
    ) -> Self {
        let (cron, tz, every_ms) = match &schedule.timing {
            Timing::Cron { cron, tz } => (
                Some(cron.as_str().to_owned()),
                Some(tz.name().to_owned()),
                None,
            ),
            Timing::Every(period) => (
                None,
                None,
                Some(u64::try_from(period.as_millis()).unwrap_or(u64::MAX)),
            ),
        };
        firings.reverse();
        Self {
            name: name.to_owned(),
            from,
            job_type: schedule.job_type.clone(),
            enabled: schedule.enabled,
            cron,
            tz,
            every_ms,
            missed: match schedule.missed {
                Missed::Skip => "skip".to_owned(),
                Missed::CatchUp(n) => format!("catch_up {n}"),
            },
            next_ms: schedule
                .enabled
                .then(|| schedule.timing.next_after(now_ms))
                .flatten(),
            firings,
        }
    }
}
