//! The host's part in the fleet's batches: follow the batch log, fold it into the
//! [`Board`] the admin API reads, and enqueue each callback that falls due, once across the
//! fleet.
//!
//! # Contract
//! - A callback fires only once this host has read the whole log up to a mark it appended
//!   after the callback fell due, so a host that reads the log from its start (it started,
//!   or reconnected) sees every firing already recorded before it decides.
//! - Two hosts that pass their marks together both find the callback due: the firing
//!   takes the callback's lock ([`firing_lock`]), held for [`FIRING_LOCK_FOR`], so one of
//!   them fires. The winner enqueues the callback's job, then appends [`BatchRecord::Fired`].
//! - A winner that dies before its job is enqueued leaves the lock to end; another host
//!   fires after it, within [`FIRING_LOCK_FOR`] and a [`RECHECK`]. A winner that dies
//!   between its enqueue and its `Fired` record, or whose record cannot be appended for
//!   as long as the lock lasts, lets another host fire the callback a second time: the one
//!   window in which a callback is enqueued twice (see docs/batches.md).
//! - A callback whose job type no plugin of this host serves is left to a host that
//!   serves it, with a warning.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::tally::{BatchView, Due, Tally};
use crate::broker::{
    Backend, BatchFollower, BatchRecord, Batches, BrokerError, Callback, Taken, UniqueLock,
};
use crate::producer::EnqueueOptions;
use crate::worker::Plugins;

/// How long a callback's lock is held: how long a host that won it has to enqueue the
/// job and record that it did before another may fire it.
pub const FIRING_LOCK_FOR: Duration = Duration::from_secs(120);

/// How often a host looks again at callbacks due and not yet fired.
pub const RECHECK: Duration = Duration::from_secs(10);

/// How long a host waits to read its own mark back before it appends another.
const MARK_PATIENCE: Duration = Duration::from_secs(30);

/// How long a host waits before it tries to follow the log again after the broker
/// refused.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// How many records the reading task reads ahead of the fold.
const READ_AHEAD: usize = 1_024;

/// The job type under which firing locks are named: no plugin's job type can take it.
const FIRING_LOCK_TYPE: &str = "jobhost.batch";

/// The lock a host takes before it fires `batch`'s `callback`.
pub fn firing_lock(batch: Uuid, callback: Callback) -> UniqueLock {
    UniqueLock::new(
        FIRING_LOCK_TYPE,
        &format!("{batch}.{}", callback.name()),
        FIRING_LOCK_FOR,
    )
    .expect("a batch id and a callback name make a valid key")
}

/// What this host knows of the fleet's batches, shared with the admin API.
#[derive(Debug, Clone, Default)]
pub struct Board(Arc<Mutex<Tally>>);

impl Board {
    fn lock(&self) -> MutexGuard<'_, Tally> {
        // No code path panics while holding the lock, so a poisoned one is still consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `batch` as this host knows it.
    pub fn view(&self, batch: Uuid) -> Option<BatchView> {
        self.lock().view(batch)
    }

    /// The last `count` batches opened, newest first.
    pub fn views(&self, count: usize) -> Vec<BatchView> {
        self.lock().views(count)
    }
}

/// Follows the batch log for one host and fires the callbacks that fall due.
#[derive(Debug)]
pub struct Keeper<B> {
    backend: B,
    plugins: Plugins,
    board: Board,
    /// This host's holder id for firing locks.
    candidate: Uuid,
    /// Callbacks this host enqueued, whose `Fired` record it may still owe.
    enqueued: BTreeSet<(Uuid, Callback)>,
}

impl<B: Backend + Batches + Clone> Keeper<B> {
    /// A keeper of `board` from `backend`'s batch log, firing callbacks routed by `plugins`.
    pub fn new(backend: B, plugins: Plugins, board: Board) -> Self {
        Self {
            backend,
            plugins,
            board,
            candidate: Uuid::new_v4(),
            enqueued: BTreeSet::new(),
        }
    }

    /// Follow the log until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // A follower is not cancel-safe (a record it took when dropped is lost), so it
        // reads on a task of its own, never raced against the recheck.
        let (records, mut read) = tokio::sync::mpsc::channel(READ_AHEAD);
        tokio::spawn(read_log(self.backend.clone(), records, shutdown.clone()));
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The mark this host waits to read back, and since when.
        let mut waiting: Option<(Uuid, Instant)> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                record = read.recv() => {
                    let Some(record) = record else { return };
                    if let BatchRecord::Mark { mark } = record {
                        if waiting.is_some_and(|(ours, _)| ours == mark) {
                            waiting = None;
                            self.fire_due().await;
                        }
                        continue;
                    }
                    let due = self.board.lock().fold(record);
                    if !due.is_empty() && waiting.is_none() {
                        waiting = self.mark().await;
                    }
                }
                _ = recheck.tick() => {
                    let stale = waiting.is_some_and(|(_, since)| since.elapsed() > MARK_PATIENCE);
                    if (waiting.is_none() || stale) && !self.board.lock().due().is_empty() {
                        waiting = self.mark().await;
                    }
                }
            }
        }
    }

    /// Append a mark to the log; `None` when the broker did not take it (the next recheck
    /// tries again).
    async fn mark(&self) -> Option<(Uuid, Instant)> {
        let mark = Uuid::new_v4();
        match self.backend.record_batch(&BatchRecord::Mark { mark }).await {
            Ok(()) => Some((mark, Instant::now())),
            Err(error) => {
                warn!(%error, "cannot append a mark to the batch log; callbacks due wait for the next look");
                None
            }
        }
    }

    /// Fire every callback due, as far as this host can.
    async fn fire_due(&mut self) {
        let due = self.board.lock().due();
        for due in due {
            if let Err(error) = self.fire(&due).await {
                warn!(batch = %due.batch, callback = due.callback.name(), %error, "a batch callback was not fired; it is tried again");
            }
        }
    }

    /// Fire `due` behind its lock, then record that it fired.
    async fn fire(&mut self, due: &Due) -> Result<(), BrokerError> {
        let key = (due.batch, due.callback);
        if !self.enqueued.contains(&key) {
            let registry = self.plugins.current();
            let Some(route) = registry.route(&due.job_type) else {
                warn!(batch = %due.batch, callback = due.callback.name(), job_type = %crate::text::bounded(&due.job_type, crate::text::NAME_MAX), "no plugin of this host serves the callback's job type; a host that serves it fires it");
                return Ok(());
            };
            let holder = Uuid::new_v5(&self.candidate, due.job_id.as_bytes());
            let lock = firing_lock(due.batch, due.callback);
            if let Taken::HeldBy(_) = self.backend.take_unique(&lock, holder).await? {
                return Ok(());
            }
            let payload =
                RawValue::from_string(due.payload.clone()).expect("a callback's payload is JSON");
            let (envelope, _) = EnqueueOptions::new().job_id(due.job_id).first_attempt(
                &due.job_type,
                route.queue.name.as_str(),
                payload,
            )?;
            self.backend.declare(&route.queue).await?;
            self.backend.publish(&envelope, None).await?;
            self.enqueued.insert(key);
            info!(batch = %due.batch, callback = due.callback.name(), job_id = %due.job_id, "batch callback enqueued");
        }
        let fired = BatchRecord::Fired {
            batch: due.batch,
            callback: due.callback,
            job_id: due.job_id,
        };
        self.backend.record_batch(&fired).await?;
        self.enqueued.remove(&key);
        Ok(())
    }
}

/// Hand every record of `backend`'s batch log to `records`, until `shutdown` or until
/// the keeper is gone.
async fn read_log<B: Batches>(
    backend: B,
    records: tokio::sync::mpsc::Sender<BatchRecord>,
    shutdown: CancellationToken,
) {
    let mut follower = loop {
        match backend.follow_batches().await {
            Ok(follower) => break follower,
            Err(error) => {
                warn!(%error, "cannot follow the batch log, trying again");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(FOLLOW_RETRY) => {}
                }
            }
        }
    };
    loop {
        // Dropped at shutdown only, when what it took no longer matters.
        let record = tokio::select! {
            () = shutdown.cancelled() => return,
            record = follower.next() => record,
        };
        let Some(record) = record else { return };
        if records.send(record).await.is_err() {
            return;
        }
    }
}
