//! `GET /api/overview`: everything the dashboard shows but the dead letters and the
//! schedules, in one body, and the queue depths behind it, read from the broker at most
//! once per [`DEPTH_MAX_AGE`] whoever asks (the page's stream, other tabs, `/metrics`
//! scrapes).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::activity::{Activity, Failure, QueueActivity, ReloadEvent, now_ms};
use crate::admin::AdminBackend;
use crate::admin::api::{PluginView, PolicyReport};
use crate::batches::{BatchView, Board};
use crate::broker::QueueDepth;
use crate::grants::Grants;
use crate::metrics::Metrics;
use crate::worker::{Fleet, Registry};

/// How old a depth reading may be before the next request reads the broker again.
pub const DEPTH_MAX_AGE: Duration = Duration::from_secs(1);
/// How long a depth reading of all queues may take; the queues a broker slower than this
/// has not answered for show no depth.
pub const DEPTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How many batches an overview carries, the newest opened: enough for a screen, and
/// what this host folded costs nothing to read, so they come with every overview rather
/// than on a polling loop of their own.
pub const BATCHES_SHOWN: usize = 20;

/// `GET /api/overview`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `"memory"` or `"rabbitmq"`.
    pub backend: String,
    /// The queues of the loaded plugins, by name.
    pub queues: Vec<QueueOverview>,
    /// The loaded plugins, by file.
    pub plugins: Vec<PluginView>,
    /// Every job type with its effective policy and wait schedule, by name.
    pub jobs: Vec<PolicyReport>,
    /// Plugin loads, replacements, refusals and removals, newest first.
    pub reloads: Vec<ReloadEvent>,
    /// Failed attempts, newest first.
    pub failures: Vec<Failure>,
    /// The last [`BATCHES_SHOWN`] batches opened, newest first, as this host folded the
    /// fleet's batch log.
    #[serde(default)]
    pub batches: Vec<BatchView>,
}

/// A queue: what waits on the broker and what this host did with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueOverview {
    /// The work queue's name.
    pub name: String,
    /// Messages ready on it; none when the broker did not say.
    pub ready: Option<u64>,
    /// Messages in its hold queues.
    pub held: Option<u64>,
    /// Messages in its dead-letter queue.
    pub dead: Option<u64>,
    /// Why the broker did not say.
    pub depth_error: Option<String>,
    /// This host's deliveries in flight and jobs settled.
    pub activity: QueueActivity,
    /// Whether the fleet has it paused, as this host learnt it last, or this host's grants
    /// file pauses it.
    #[serde(default)]
    pub paused: bool,
    /// Whether this host's grants file pauses it (`paused = true`), which a resume order
    /// does not undo.
    #[serde(default)]
    pub paused_in_file: bool,
}

/// The depths of some queues, as last read.
type Reading = Arc<Vec<(String, Result<QueueDepth, String>)>>;

/// The last depth reading, shared by everyone who asks.
#[derive(Debug, Default)]
pub(super) struct Depths(Mutex<Option<(Instant, Vec<String>, Reading)>>);

impl Depths {
    /// The depths of `queues`, read from `backend` unless a reading of the same queues is
    /// younger than [`DEPTH_MAX_AGE`]. Callers arriving during a read wait for it, so
    /// the broker sees one read however many ask.
    pub(super) async fn read<B: AdminBackend>(&self, backend: &B, queues: Vec<String>) -> Reading {
        let mut last = self.0.lock().await;
        if let Some((at, names, reading)) = &*last
            && at.elapsed() < DEPTH_MAX_AGE
            && *names == queues
        {
            return Arc::clone(reading);
        }
        // One deadline for the whole reading, so a broker that stopped answering costs
        // a request `DEPTH_TIMEOUT`, not that much per queue.
        let deadline = Instant::now() + DEPTH_TIMEOUT;
        let mut reading = Vec::with_capacity(queues.len());
        for queue in &queues {
            let depth = match tokio::time::timeout_at(deadline, backend.depth(queue)).await {
                Ok(Ok(depth)) => Ok(depth),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!(
                    "the broker did not answer within {DEPTH_TIMEOUT:?}"
                )),
            };
            reading.push((queue.clone(), depth));
        }
        let reading = Arc::new(reading);
        *last = Some((Instant::now(), queues, Arc::clone(&reading)));
        reading
    }
}

/// The names of the queues `registry` consumes, sorted.
pub(super) fn queue_names(registry: &Registry) -> Vec<String> {
    let mut names: Vec<String> = registry.queues().map(|q| q.name.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// Set `jobhost_hold_queue_messages` from `reading`; a queue the broker did not answer
/// for keeps its last value.
pub(super) fn export_holds(metrics: &Metrics, reading: &Reading) {
    for (queue, depth) in reading.iter() {
        if let Ok(depth) = depth {
            metrics.hold_queue_messages(queue, depth.held);
        }
    }
}

/// The overview of `registry` with the depths of `reading`.
pub(super) fn overview(
    backend: &str,
    registry: &Registry,
    grants: &Grants,
    activity: &Activity,
    fleet: &Fleet,
    batches: &Board,
    reading: &Reading,
) -> Overview {
    let queues = reading
        .iter()
        .map(|(name, depth)| {
            let (depth, error) = match depth {
                Ok(depth) => (Some(*depth), None),
                Err(err) => (None, Some(err.clone())),
            };
            QueueOverview {
                name: name.clone(),
                ready: depth.map(|d| d.ready),
                held: depth.map(|d| d.held),
                dead: depth.map(|d| d.dead),
                depth_error: error,
                activity: activity.queue(name),
                paused: fleet.is_paused(name),
                paused_in_file: grants.paused().contains(name),
            }
        })
        .collect();
    let mut jobs: Vec<PolicyReport> = registry
        .routes()
        .map(|route| PolicyReport::of(route, grants))
        .collect();
    jobs.sort_by(|a, b| a.job_type.cmp(&b.job_type));
    Overview {
        at_ms: now_ms(),
        backend: backend.to_owned(),
        queues,
        plugins: PluginView::all(registry, grants),
        jobs,
        reloads: activity.reloads(),
        failures: activity.failures(),
        batches: batches.views(BATCHES_SHOWN),
    }
}
