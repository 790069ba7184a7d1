//! The JSON bodies of the admin API, shared by the server and the client.
//!
//! Durations are whole milliseconds (`*_ms`) so that any HTTP client reads them without
//! knowing serde's encoding of [`Duration`].

use std::time::Duration;

use jobhost_sdk::limits::QueueLimits;
use jobhost_sdk::{Backoff, QueueConfig, QueueType, RetryPolicy};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use super::grants_view::{GrantsView, SecretView};
pub use super::schedules_view::ScheduleView;
pub use crate::broker::{Command, DeadLetterList, DeadLetterView, Order, Replayed as ReplayReport};
use crate::grants::{Grants, LimitSource, Pin};
use crate::job::JobSpec;
use crate::job::Operator;
use crate::worker::{Registry, Route, Unit};

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Always `"ok"`: a host that answers is up.
    pub status: String,
    /// `"memory"` or `"rabbitmq"`.
    pub backend: String,
    /// How many plugins are loaded.
    pub plugins: usize,
}

/// A loaded plugin, in `GET /plugins`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginView {
    /// The plugin's name.
    pub name: String,
    /// Its version (a content hash).
    pub version: String,
    /// The file it was loaded from.
    pub file: String,
    /// The queues it declares.
    pub queues: Vec<QueueView>,
    /// The job types it serves, with their effective policies.
    pub jobs: Vec<JobView>,
    /// What the grants file's section for it grants (shown even when its pin does not
    /// hold); `None` when the file has no section for it, so it is granted nothing beyond
    /// the sandbox.
    #[serde(default)]
    pub grants: Option<GrantsView>,
    /// How its file binds it to its grants; `None` for a handler not loaded from a file.
    #[serde(default)]
    pub binding: Option<BindingView>,
    /// While this version is on probation: the version it is judged against, which
    /// serves the rest of the deliveries (docs/replay.md, "Canary reloads").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_probation_against: Option<String>,
}

/// How a plugin's file binds it to its grants: the section its file's stem names, its
/// binary's digest, and whether the section's pin holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingView {
    /// `NAME` of the `[plugins.NAME]` section its file (`NAME.wasm`) is granted by.
    pub section: String,
    /// The sha256 of its binary, as a section's `sha256` pins it.
    pub sha256: String,
    /// Whether the section pins a digest and whether it is this binary's; on `mismatch`
    /// the plugin runs without its grants.
    pub pin: Pin,
}

impl PluginView {
    /// Every plugin of `registry`, by file, with what `grants` grants it.
    pub fn all(registry: &Registry, grants: &Grants) -> Vec<Self> {
        registry
            .units()
            .map(|unit| Self::of(registry, grants, unit))
            .collect()
    }

    fn of(registry: &Registry, grants: &Grants, unit: &Unit) -> Self {
        let manifest = unit.manifest();
        let section = unit.identity().and_then(|id| grants.plugin(&id.name));
        Self {
            grants: section.map(|granted| GrantsView::new(granted, grants.outbound())),
            binding: unit.identity().map(|id| BindingView {
                section: id.name.to_string(),
                sha256: id.sha256.to_string(),
                pin: section.map_or(Pin::Unpinned, |granted| granted.pin(&id.sha256)),
            }),
            name: unit.name().to_owned(),
            version: unit.version().to_owned(),
            on_probation_against: unit.incumbent().map(|old| old.version().to_owned()),
            file: unit.key().to_owned(),
            queues: manifest
                .queues
                .iter()
                .map(|queue| {
                    let declared = manifest.limits.queues.get(&queue.name);
                    let declared = declared.cloned().unwrap_or_default();
                    QueueView {
                        concurrency: CapView::of_queue(grants, &queue.name, &declared, unit.name()),
                        rate: RateView::of_queue(grants, &queue.name, &declared, unit.name()),
                        ..QueueView::from(queue)
                    }
                })
                .collect(),
            jobs: manifest
                .jobs
                .iter()
                .filter_map(|job| registry.route(&job.name))
                .map(|route| JobView {
                    concurrency: CapView::of_job(grants, route),
                    rate: RateView::of_job(grants, route),
                    ..JobView::of(route)
                })
                .collect(),
        }
    }
}

/// A job type and the policy that decides its failures now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job type name.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Where the effective policy comes from.
    pub source: PolicySource,
    /// The effective policy.
    pub policy: PolicyView,
    /// The job's own timeout, when it sets one.
    pub timeout_ms: Option<u64>,
    /// Its per-key concurrency cap, when the grants file sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<CapView>,
    /// Its per-key rate limit, when the grants file sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateView>,
    /// How its jobs are unique, when its plugin declares it (`#[job(unique(..))]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<UniqueView>,
}

/// Unique jobs per key, as a job type declares them: an enqueue through the host or a
/// typed producer while a job of the same value is queued, held or running is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UniqueView {
    /// The payload field whose value is the key.
    pub key: String,
    /// How long a job holds its key at most, in milliseconds.
    pub for_ms: u64,
}

impl JobView {
    fn of(route: &Route) -> Self {
        Self {
            name: route.job.name.clone(),
            queue: route.queue.name.clone(),
            source: PolicySource::of(&route.job, &route.queue),
            policy: PolicyView::from(route.policy()),
            timeout_ms: route.job.timeout.map(millis),
            concurrency: None,
            rate: None,
            unique: route.job_limits.unique.as_ref().map(|unique| UniqueView {
                key: unique.key.clone(),
                for_ms: millis(unique.for_),
            }),
        }
    }
}

/// A fleet-wide concurrency cap in force (see docs/flow-control.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapView {
    /// Jobs running at once across the fleet: of the queue, or of one key.
    pub limit: u32,
    /// The payload field whose value is the key, for a per-key cap.
    pub key: Option<String>,
    /// Where it is set: the grants file's section, e.g. `[queues."emails"] in jobhost.toml`,
    /// or the plugin that declares it, e.g. `plugin email-sender`.
    pub from: String,
}

/// Where a limit in force is set, as the views say it: the grants file's `section`, or
/// the plugin `plugin`.
fn set_in(grants: &Grants, source: LimitSource, section: String, plugin: &str) -> String {
    match source {
        LimitSource::File => format!("{section} in {}", grants.shown_file()),
        LimitSource::Plugin => format!("plugin {}", plugin.split('@').next().unwrap_or(plugin)),
    }
}

impl CapView {
    /// The cap of `queue` in force, whose plugin `plugin` declares `declared`.
    fn of_queue(
        grants: &Grants,
        queue: &str,
        declared: &QueueLimits,
        plugin: &str,
    ) -> Option<Self> {
        grants
            .queue_concurrency(queue, declared)
            .map(|(limit, source)| Self {
                limit,
                key: None,
                from: set_in(grants, source, format!("[queues.{queue:?}]"), plugin),
            })
    }

    /// The per-key cap of `route`'s job type in force.
    fn of_job(grants: &Grants, route: &Route) -> Option<Self> {
        let job_type = &route.job.name;
        grants
            .job_concurrency(job_type, &route.job_limits)
            .map(|(cap, source)| Self {
                limit: cap.limit,
                key: Some(cap.key.clone()),
                from: set_in(
                    grants,
                    source,
                    format!("[jobs.{job_type:?}]"),
                    &route.plugin,
                ),
            })
    }

    /// How a person reads it: `4 at once` or `2 at once per customer_id`.
    pub fn describe(&self) -> String {
        match &self.key {
            Some(key) => format!("{} at once per {key}", self.limit),
            None => format!("{} at once", self.limit),
        }
    }
}

/// A fleet-wide rate limit in force (see docs/flow-control.md, "Rate limits").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateView {
    /// Jobs started per unit across the fleet, as the grants file writes it: `10/s`.
    pub limit: String,
    /// How many may start at once after a quiet spell.
    pub burst: u32,
    /// The payload field whose value is the key, for a per-key limit; none for a queue's
    /// or a job type's as a whole.
    pub key: Option<String>,
    /// Whether a job deferred for a called service's `Retry-After` holds its key's other
    /// jobs back as long (a per-key limit's `respect_retry_after`).
    #[serde(default)]
    pub respects_retry_after: bool,
    /// Where it is set: the grants file's section, e.g. `[queues."emails"] in jobhost.toml`.
    pub from: String,
}

impl RateView {
    /// The rate limit of `queue` in force, whose plugin `plugin` declares `declared`.
    fn of_queue(
        grants: &Grants,
        queue: &str,
        declared: &QueueLimits,
        plugin: &str,
    ) -> Option<Self> {
        grants
            .queue_rate(queue, declared)
            .map(|(rate, source)| Self {
                limit: rate.shown(),
                burst: rate.burst,
                key: None,
                respects_retry_after: false,
                from: set_in(grants, source, format!("[queues.{queue:?}]"), plugin),
            })
    }

    /// The per-key rate limit of `route`'s job type in force.
    fn of_job(grants: &Grants, route: &Route) -> Option<Self> {
        let job_type = &route.job.name;
        grants
            .job_rate(job_type, &route.job_limits)
            .map(|(limit, source)| Self {
                limit: limit.rate.shown(),
                burst: limit.rate.burst,
                key: limit.key.clone(),
                respects_retry_after: limit.respect_retry_after,
                from: set_in(
                    grants,
                    source,
                    format!("[jobs.{job_type:?}]"),
                    &route.plugin,
                ),
            })
    }

    /// How a person reads it: `10/s, burst 5`, `10/s, burst 5, per customer_id`, or
    /// `10/s, burst 5, per customer_id, respects Retry-After`.
    pub fn describe(&self) -> String {
        let per = self
            .key
            .as_ref()
            .map_or_else(String::new, |key| format!(", per {key}"));
        let respects = if self.respects_retry_after {
            ", respects Retry-After"
        } else {
            ""
        };
        format!("{}, burst {}{per}{respects}", self.limit, self.burst)
    }
}

/// Which declaration the effective policy of a job comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicySource {
    /// The job's own `retry(...)`.
    Job,
    /// Its queue's `retry(...)`.
    Queue,
    /// Neither writes one: one attempt, dead-lettered on the first failure.
    Default,
}

impl PolicySource {
    fn of(job: &JobSpec, queue: &QueueConfig) -> Self {
        if job.retry.is_some() {
            Self::Job
        } else if queue.retry == RetryPolicy::default() {
            Self::Default
        } else {
            Self::Queue
        }
    }

    /// How a person reads it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Job => "the job's own retry(...)",
            Self::Queue => "its queue's retry(...)",
            Self::Default => "the default: no retry attribute, so no retries",
        }
    }
}

/// A queue's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    /// The broker name.
    pub name: String,
    /// Unacknowledged deliveries a consumer may hold.
    pub prefetch: u16,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// `classic` or `quorum`; `classic` when a host of an older version leaves it out.
    #[serde(default)]
    pub queue_type: QueueType,
    /// `x-max-priority`; 0 means none.
    pub max_priority: u8,
    /// `x-message-ttl`, when set.
    pub message_ttl_ms: Option<u64>,
    /// The policy of the queue's jobs that have none of their own.
    pub retry: PolicyView,
    /// An attempt's timeout, unless the job sets one.
    pub timeout_ms: Option<u64>,
    /// Its concurrency cap, when the grants file sets one (`GET /plugins` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<CapView>,
    /// Its rate limit, when the grants file sets one (`GET /plugins` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateView>,
}

impl From<&QueueConfig> for QueueView {
    fn from(queue: &QueueConfig) -> Self {
        Self {
            name: queue.name.clone(),
            prefetch: queue.prefetch,
            durable: queue.durable,
            queue_type: queue.queue_type,
            max_priority: queue.max_priority,
            message_ttl_ms: queue.message_ttl.map(millis),
            retry: PolicyView::from(&queue.retry),
            timeout_ms: queue.timeout.map(millis),
            concurrency: None,
            rate: None,
        }
    }
}

impl From<&QueueView> for QueueConfig {
    fn from(view: &QueueView) -> Self {
        Self {
            name: view.name.clone(),
            prefetch: view.prefetch,
            durable: view.durable,
            queue_type: view.queue_type,
            max_priority: view.max_priority,
            message_ttl: view.message_ttl_ms.map(Duration::from_millis),
            retry: RetryPolicy::from(&view.retry),
            timeout: view.timeout_ms.map(Duration::from_millis),
        }
    }
}

/// A retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    /// Total attempts including the first.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: BackoffView,
}

impl From<&RetryPolicy> for PolicyView {
    fn from(policy: &RetryPolicy) -> Self {
        Self {
            max_attempts: policy.max_attempts,
            backoff: BackoffView::from(&policy.backoff),
        }
    }
}

impl From<&PolicyView> for RetryPolicy {
    fn from(view: &PolicyView) -> Self {
        Self::new(view.max_attempts, Backoff::from(&view.backoff))
    }
}

/// A backoff, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackoffView {
    /// Retry at once.
    None,
    /// The same wait before every retry.
    Fixed {
        /// The wait.
        delay_ms: u64,
    },
    /// `min(max, base * factor^(failed_attempt - 1))`, optionally with full jitter.
    Exponential {
        /// The wait after the first failed attempt.
        base_ms: u64,
        /// The growth per failed attempt.
        factor: f64,
        /// The cap on any single wait.
        max_ms: u64,
        /// Whether each wait is drawn from `[0, computed]`.
        jitter: bool,
    },
}

impl From<&Backoff> for BackoffView {
    fn from(backoff: &Backoff) -> Self {
        match *backoff {
            Backoff::None => Self::None,
            Backoff::Fixed(delay) => Self::Fixed {
                delay_ms: millis(delay),
            },
            Backoff::Exponential {
                base,
                factor,
                max,
                jitter,
            } => Self::Exponential {
                base_ms: millis(base),
                factor,
                max_ms: millis(max),
                jitter,
            },
        }
    }
}

impl From<&BackoffView> for Backoff {
    fn from(view: &BackoffView) -> Self {
        match *view {
            BackoffView::None => Self::None,
            BackoffView::Fixed { delay_ms } => Self::Fixed(Duration::from_millis(delay_ms)),
            BackoffView::Exponential {
                base_ms,
                factor,
                max_ms,
                jitter,
            } => Self::Exponential {
                base: Duration::from_millis(base_ms),
                factor,
                max: Duration::from_millis(max_ms),
                jitter,
            },
        }
    }
}

/// `GET /policy/{job_type}`: the effective policy of a job type and its wait schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    /// The job type.
    pub job_type: String,
    /// The plugin serving it, `name@version`.
    pub plugin: String,
    /// Its queue, whose settings an enqueue needs to declare it.
    pub queue: QueueView,
    /// Where the policy comes from.
    pub source: PolicySource,
    /// The effective policy.
    pub policy: PolicyView,
    /// The computed wait (before jitter) after each failed attempt.
    pub schedule: Vec<ScheduleRow>,
    /// The job type's per-key concurrency cap, when the grants file sets one (its queue's
    /// is `queue.concurrency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<CapView>,
    /// The job type's per-key rate limit, when the grants file sets one (its queue's is
    /// `queue.rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateView>,
}

impl PolicyReport {
    /// The report for `route`, with the caps of `grants`.
    pub fn of(route: &Route, grants: &Grants) -> Self {
        Self {
            job_type: route.job.name.clone(),
            plugin: route.plugin.to_string(),
            queue: QueueView {
                concurrency: CapView::of_queue(
                    grants,
                    &route.queue.name,
                    &route.queue_limits,
                    &route.plugin,
                ),
                rate: RateView::of_queue(
                    grants,
                    &route.queue.name,
                    &route.queue_limits,
                    &route.plugin,
                ),
                ..QueueView::from(&route.queue)
            },
            source: PolicySource::of(&route.job, &route.queue),
            policy: PolicyView::from(route.policy()),
            schedule: schedule(&route.policy().backoff),
            concurrency: CapView::of_job(grants, route),
            rate: RateView::of_job(grants, route),
        }
    }
}

/// One row of a wait schedule, as in the chapter's "Failed attempt | Computed wait" table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRow {
    /// The failed attempt (1-based).
    pub failed_attempt: u32,
    /// Whether this row stands for every later attempt too.
    pub and_later: bool,
    /// The computed wait, before jitter.
    pub computed_wait_ms: u64,
    /// Whether the wait is the backoff's cap.
    pub capped: bool,
}

/// The most rows a schedule lists before its last row stands for the rest.
const MAX_SCHEDULE_ROWS: u32 = 32;

/// The computed waits of `backoff`, from the first failed attempt until they stop
/// changing (the cap, or a constant wait), whose row then stands for every later attempt.
pub fn schedule(backoff: &Backoff) -> Vec<ScheduleRow> {
    let cap = match *backoff {
        Backoff::Exponential { max, .. } => Some(max),
        Backoff::None | Backoff::Fixed(_) => None,
    };
    let mut rows = Vec::new();
    for attempt in 1..=MAX_SCHEDULE_ROWS {
        let wait = backoff.computed_delay(attempt);
        let next = backoff.computed_delay(attempt + 1);
        let and_later = next == wait || attempt == MAX_SCHEDULE_ROWS;
        rows.push(ScheduleRow {
            failed_attempt: attempt,
            and_later,
            computed_wait_ms: millis(wait),
            capped: cap == Some(wait),
        });
        if and_later {
            break;
        }
    }
    rows
}

/// `POST /jobs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnqueueRequest {
    /// The job type; a loaded plugin must serve it.
    pub job_type: String,
    /// The job's JSON.
    pub payload: serde_json::Value,
    /// Deliver after this long instead of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// The job expires this long after it is enqueued, on the host's clock: delivered at or
    /// after that, it is settled as expired without running. `0` expires at once; a length
    /// past the end of time never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// The job is unique by this key among the jobs of its type: while one with the same
    /// key is queued, held or running, the enqueue is refused (`409 Conflict`, naming that
    /// job in `existing_job_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<UniqueRequest>,
    /// A W3C `traceparent` (`00-{trace id}-{parent id}-{flags}`) whose trace the job
    /// joins, as a child of the parent id; without one the job starts a new trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The `unique` of `POST /jobs`: the key, and how long it is held at most.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UniqueRequest {
    /// The key, 1 to [`UNIQUE_KEY_MAX`](crate::broker::UNIQUE_KEY_MAX) bytes; hashed, never
    /// stored as such.
    pub key: String,
    /// The key is free again this long after the enqueue at the latest, even if the job
    /// has not settled (its host died holding it, say).
    pub for_ms: u64,
}

/// The answer to `POST /jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new job's id.
    pub job_id: Uuid,
    /// The queue it went to.
    pub queue: String,
    /// The delay it waits, rounded up to the host's retry granularity.
    pub delay_ms: Option<u64>,
    /// When it expires, in milliseconds since the Unix epoch, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The trace the job belongs to: the `traceparent`'s, or a new one (32 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// The answer to `DELETE /dead/{queue}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReport {
    /// Dead letters dropped.
    pub purged: u32,
}

/// Any error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, and what to do about it.
    pub error: String,
    /// The job holding the unique key of a refused `POST /jobs`, when the broker could tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_job_id: Option<Uuid>,
}

/// `POST /queues/{queue}/pause`, `POST /queues/{queue}/resume`, `POST /jobs/{job_id}/cancel`:
/// who asks, as the order records it (checked as an [`Operator`]). The answer is the
/// [`Order`] as the fleet received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRequest {
    /// Who asks, e.g. `alice@build-7`.
    pub by: Operator,
}

/// The body of `POST /recordings`: whose recordings to find.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingsRequest {
    /// The jobs, at most [`MAX_RECORDINGS_ASKED`](super::MAX_RECORDINGS_ASKED).
    pub job_ids: Vec<uuid::Uuid>,
}

/// `duration` in whole milliseconds, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_exponential_schedule_is_the_chapters_table() {
        let rows = schedule(&Backoff::exponential());
        let waits: Vec<(u32, u64, bool)> = rows
            .iter()
            .map(|r| (r.failed_attempt, r.computed_wait_ms / 1000, r.and_later))
            .collect();
        assert_eq!(
            waits,
            vec![
                (1, 1, false),
                (2, 2, false),
                (3, 4, false),
                (4, 8, false),
                (5, 16, false),
                (6, 32, false),
                (7, 64, false),
                (8, 128, false),
                (9, 256, false),
                (10, 300, true),
            ],
            "1s doubling up to 256s, then the 300s cap for attempt 10 and later"
        );
        assert!(
            rows.last().is_some_and(|r| r.capped),
            "the last row is the cap"
        );
    }

    #[test]
    fn a_constant_wait_is_one_row_for_every_attempt() {
        let rows = schedule(&Backoff::Fixed(Duration::from_secs(3)));
        assert_eq!(rows.len(), 1, "a fixed wait never changes");
        assert!(rows[0].and_later && !rows[0].capped);
        assert_eq!(schedule(&Backoff::None)[0].computed_wait_ms, 0);
    }

    #[test]
    fn a_backoff_that_never_reaches_its_cap_stops_after_the_row_limit() {
        let slow = Backoff::Exponential {
            base: Duration::from_millis(1),
            factor: 1.01,
            max: Duration::from_secs(3600),
            jitter: false,
        };
        let rows = schedule(&slow);
        assert_eq!(rows.len(), MAX_SCHEDULE_ROWS as usize);
        assert!(rows.last().is_some_and(|r| r.and_later));
    }

    #[test]
    fn policies_survive_the_round_trip_through_their_views() {
        for policy in [
            RetryPolicy::none(),
            RetryPolicy::exponential(5),
            RetryPolicy::fixed(3, Duration::from_millis(500)),
        ] {
            assert_eq!(RetryPolicy::from(&PolicyView::from(&policy)), policy);
        }
        let mut queue = QueueConfig::new("q");
        queue.message_ttl = Some(Duration::from_secs(60));
        assert_eq!(QueueConfig::from(&QueueView::from(&queue)), queue);
        queue.queue_type = QueueType::Quorum;
        assert_eq!(
            QueueConfig::from(&QueueView::from(&queue)),
            queue,
            "a client declares a quorum queue as the host does"
        );
    }
}
