//! The fold of the batch log: what each host knows of every batch, and which callbacks
//! are due.
//!
//! # Contract
//! - Folding is idempotent and needs only the log's order: an opening seen again, an
//!   ending seen again (a member redelivered after a host died between its record and its
//!   ack) or a firing seen again changes nothing, so a follower that starts the log over
//!   after a reconnect folds it to the same state.
//! - A member may add members to its batch before it ends ([`BatchRecord::Add`]); an add
//!   by a job that is not a member, or met once every member completed, changes nothing.
//! - A member counts once, by its job id; an ending of a job that is not a member of an
//!   opened batch (a forged `batch` field, or a batch past the log's retention) is ignored.
//!   A member that ended dead and then completed (its dead letter replayed) counts as
//!   completed from then on.
//! - A callback is due when its condition holds and the log has no firing of it:
//!   `on_death` once a member is dead, `on_complete` once none is pending, `on_success`
//!   once none is pending and none is dead.
//! - What it keeps is bounded: at most [`TRACKED_MAX`] members of batches still running
//!   and [`BATCHES_KEPT`] batches in all; past either, the batches opened first are
//!   forgotten, with a warning. A batch whose members all completed keeps only its counts.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;
use uuid::Uuid;

use jobhost_sdk::batch::BatchCallback;

use crate::broker::{BatchRecord, Callback, Callbacks, MemberEnd, Opened};

/// The most members of running batches a host keeps track of.
pub const TRACKED_MAX: usize = 1_000_000;

/// The most batches a host keeps, running or done.
pub const BATCHES_KEPT: usize = 10_000;

/// What a host knows of the fleet's batches.
#[derive(Debug, Default)]
pub struct Tally {
    batches: HashMap<Uuid, Batch>,
    /// The batches by opening, oldest first, for forgetting the oldest.
    opened: VecDeque<Uuid>,
    /// Members of the batches that still track theirs.
    tracked: usize,
}

#[derive(Debug)]
struct Batch {
    total: usize,
    /// Each member's end so far; emptied once every member completed.
    members: HashMap<Uuid, Option<MemberEnd>>,
    completed: usize,
    dead: usize,
    callbacks: Callbacks,
    context: Option<serde_json::Value>,
    opened_at_ms: u64,
    fired: BTreeMap<Callback, Uuid>,
}

impl Batch {
    fn pending(&self) -> usize {
        self.total - self.completed - self.dead
    }

    fn is_due(&self, callback: Callback) -> bool {
        !self.fired.contains_key(&callback)
            && self.callbacks.get(callback).is_some()
            && match callback {
                Callback::OnDeath => self.dead > 0,
                Callback::OnComplete => self.pending() == 0,
                Callback::OnSuccess => self.pending() == 0 && self.dead == 0,
            }
    }
}

/// A callback due: the job to enqueue for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The batch.
    pub batch: Uuid,
    /// Which callback.
    pub callback: Callback,
    /// The job type to enqueue.
    pub job_type: String,
    /// The callback's job id, the same on every host ([`callback_job_id`]).
    pub job_id: Uuid,
    /// Its payload: the batch's counts and its context, a [`BatchCallback`] as the SDK
    /// reads it.
    pub payload: String,
}

/// A batch as `jobhost batches` and the API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BatchView {
    /// The batch.
    pub batch_id: Uuid,
    /// Its members.
    pub total: usize,
    /// Those that completed.
    pub completed: usize,
    /// Those that went to the dead letters.
    pub dead: usize,
    /// Those still queued, held or running.
    pub pending: usize,
    /// When it was opened, in milliseconds since the Unix epoch.
    pub opened_at_ms: u64,
    /// Each of its callbacks: the job type, and the job once fired.
    pub callbacks: Vec<CallbackView>,
}

/// One callback of a [`BatchView`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CallbackView {
    /// `on_success`, `on_complete` or `on_death`.
    pub callback: String,
    /// The job type it enqueues.
    pub job_type: String,
    /// The job it enqueued, once it fired.
    pub fired: Option<Uuid>,
}

/// The id of `batch`'s `callback` job: the same on every host, so the log and the views
/// name it before and after it fires.
pub fn callback_job_id(batch: Uuid, callback: Callback) -> Uuid {
    Uuid::new_v5(&batch, callback.name().as_bytes())
}

impl Tally {
    /// Fold `record` in; the callbacks it made due.
    pub fn fold(&mut self, record: BatchRecord) -> Vec<Due> {
        let Some(batch) = record.batch() else {
            return Vec::new();
        };
        match record {
            BatchRecord::Open(opened) => {
                self.open(opened);
                return Vec::new();
            }
            BatchRecord::Add { by, members, .. } => self.add(batch, by, &members),
            BatchRecord::End { job_id, end, .. } => self.end(batch, job_id, end),
            BatchRecord::Fired {
                callback, job_id, ..
            } => {
                if let Some(kept) = self.batches.get_mut(&batch) {
                    kept.fired.insert(callback, job_id);
                }
                return Vec::new();
            }
            BatchRecord::Mark { .. } => return Vec::new(),
        }
        self.due_of(batch)
    }

    /// Every callback due, of every batch.
    pub fn due(&self) -> Vec<Due> {
        self.opened.iter().flat_map(|id| self.due_of(*id)).collect()
    }

    /// `batch` as shown, if this host knows it.
    pub fn view(&self, batch: Uuid) -> Option<BatchView> {
        let kept = self.batches.get(&batch)?;
        Some(BatchView {
            batch_id: batch,
            total: kept.total,
            completed: kept.completed,
            dead: kept.dead,
            pending: kept.pending(),
            opened_at_ms: kept.opened_at_ms,
            callbacks: kept
                .callbacks
                .each()
                .map(|(callback, job_type)| CallbackView {
                    callback: callback.name().to_owned(),
                    job_type: job_type.to_owned(),
                    fired: kept.fired.get(&callback).copied(),
                })
                .collect(),
        })
    }

    /// The last `count` batches opened, newest first.
    pub fn views(&self, count: usize) -> Vec<BatchView> {
        self.opened
            .iter()
            .rev()
            .take(count)
            .filter_map(|id| self.view(*id))
            .collect()
    }

    fn open(&mut self, opened: Opened) {
        if self.batches.contains_key(&opened.batch) {
            return;
        }
        let members: HashMap<Uuid, Option<MemberEnd>> =
            opened.members.iter().map(|id| (*id, None)).collect();
        let total = members.len();
        while !self.opened.is_empty()
            && (self.opened.len() >= BATCHES_KEPT || self.tracked + total > TRACKED_MAX)
        {
            let oldest = self.opened.pop_front().expect("not empty");
            if let Some(forgotten) = self.batches.remove(&oldest) {
                self.tracked -= forgotten.members.len();
                tracing::warn!(batch = %oldest, pending = forgotten.pending(), "a batch was forgotten to keep the batches a host tracks bounded");
            }
        }
        self.tracked += total;
        self.opened.push_back(opened.batch);
        self.batches.insert(
            opened.batch,
            Batch {
                total,
                members,
                completed: 0,
                dead: 0,
                callbacks: opened.callbacks,
                context: opened.context,
                opened_at_ms: opened.at_ms,
                fired: BTreeMap::new(),
            },
        );
    }

    /// Add `members` to `batch`, as its member `by` asked before it ended. A batch whose
    /// members all completed keeps only its counts, so an add it meets then is a run of a
    /// member seen again (its host died before its ack) and changes nothing; so is a member
    /// already known.
    fn add(&mut self, batch: Uuid, by: Uuid, members: &[Uuid]) {
        let Some(kept) = self.batches.get_mut(&batch) else {
            return;
        };
        if !kept.members.contains_key(&by) {
            return;
        }
        for member in members {
            if self.tracked >= TRACKED_MAX {
                tracing::warn!(%batch, "members added past the bound a host tracks are not counted");
                return;
            }
            if kept.members.insert(*member, None).is_none() {
                kept.total += 1;
                self.tracked += 1;
            }
        }
    }

    fn end(&mut self, batch: Uuid, job_id: Uuid, end: MemberEnd) {
        let Some(kept) = self.batches.get_mut(&batch) else {
            return;
        };
        let Some(member) = kept.members.get_mut(&job_id) else {
            return;
        };
        match (*member, end) {
            (None, MemberEnd::Completed) => kept.completed += 1,
            (None, MemberEnd::Dead) => kept.dead += 1,
            (Some(MemberEnd::Dead), MemberEnd::Completed) => {
                kept.dead -= 1;
                kept.completed += 1;
            }
            // Seen already, or a completed member dead-lettered by a late duplicate: a
            // member that completed stays completed.
            (Some(MemberEnd::Dead), MemberEnd::Dead) | (Some(MemberEnd::Completed), _) => {
                return;
            }
        }
        *member = Some(end);
        if kept.completed == kept.total {
            // Nothing can change any more: the counts are all there is to keep.
            self.tracked -= kept.members.len();
            kept.members = HashMap::new();
        }
    }

    fn due_of(&self, batch: Uuid) -> Vec<Due> {
        let Some(kept) = self.batches.get(&batch) else {
            return Vec::new();
        };
        Callback::ALL
            .into_iter()
            .filter(|callback| kept.is_due(*callback))
            .map(|callback| {
                let payload = BatchCallback {
                    batch_id: batch.to_string(),
                    callback: callback.name().to_owned(),
                    total: count(kept.total),
                    completed: count(kept.completed),
                    dead: count(kept.dead),
                    context: kept.context.as_ref(),
                };
                Due {
                    batch,
                    callback,
                    job_type: kept.callbacks.get(callback).expect("due").to_owned(),
                    job_id: callback_job_id(batch, callback),
                    payload: serde_json::to_string(&payload).expect("a payload serializes"),
                }
            })
            .collect()
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(members: &[Uuid], callbacks: Callbacks) -> Opened {
        Opened {
            batch: Uuid::new_v4(),
            members: members.to_vec(),
            callbacks,
            context: None,
            at_ms: 7,
        }
    }

    fn all_three() -> Callbacks {
        Callbacks {
            on_success: Some("r.Success".into()),
            on_complete: Some("r.Complete".into()),
            on_death: Some("r.Death".into()),
        }
    }

    /// A tally that folded the opening of a batch of `n` members with all three callbacks.
    fn opened_with_all_three(n: usize) -> (Tally, Uuid, Vec<Uuid>) {
        let members: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
        let open = opened(&members, all_three());
        let batch = open.batch;
        let mut tally = Tally::default();
        assert!(tally.fold(BatchRecord::Open(open)).is_empty());
        (tally, batch, members)
    }

    /// Whether folding `member`'s completion made nothing due.
    fn completes_quietly(tally: &mut Tally, batch: Uuid, member: Uuid) -> bool {
        tally
            .fold(end(batch, member, MemberEnd::Completed))
            .is_empty()
    }

    fn end(batch: Uuid, job_id: Uuid, end: MemberEnd) -> BatchRecord {
        BatchRecord::End { batch, job_id, end }
    }

    fn due(dues: &[Due]) -> Vec<Callback> {
        dues.iter().map(|due| due.callback).collect()
    }

    #[test]
    fn a_batch_whose_members_all_complete_is_due_its_success_and_completion_once_the_last_ends() {
        let (mut tally, batch, members) = opened_with_all_three(2);
        assert!(completes_quietly(&mut tally, batch, members[0]));
        // The same ending again, as after a host died between its record and its ack.
        assert!(completes_quietly(&mut tally, batch, members[0]));
        let dues = tally.fold(end(batch, members[1], MemberEnd::Completed));
        assert_eq!(due(&dues), [Callback::OnSuccess, Callback::OnComplete]);
        let payload: serde_json::Value = serde_json::from_str(&dues[0].payload).unwrap();
        assert_eq!(payload["total"], 2);
        assert_eq!(payload["completed"], 2);
        assert_eq!(payload["callback"], "on_success");
        assert_eq!(dues[0].job_id, callback_job_id(batch, Callback::OnSuccess));
    }

    #[test]
    fn a_dead_member_makes_death_due_at_once_and_success_never() {
        let (mut tally, batch, members) = opened_with_all_three(2);
        let dues = tally.fold(end(batch, members[0], MemberEnd::Dead));
        assert_eq!(due(&dues), [Callback::OnDeath]);
        tally.fold(BatchRecord::Fired {
            batch,
            callback: Callback::OnDeath,
            job_id: dues[0].job_id,
        });
        let dues = tally.fold(end(batch, members[1], MemberEnd::Completed));
        assert_eq!(due(&dues), [Callback::OnComplete]);
        let view = tally.view(batch).unwrap();
        assert_eq!((view.completed, view.dead, view.pending), (1, 1, 0));
    }

    #[test]
    fn a_fired_callback_is_not_due_again_and_a_replayed_dead_member_can_still_make_the_batch_succeed()
     {
        let (mut tally, batch, members) = opened_with_all_three(1);
        for due in tally.fold(end(batch, members[0], MemberEnd::Dead)) {
            tally.fold(BatchRecord::Fired {
                batch,
                callback: due.callback,
                job_id: due.job_id,
            });
        }
        assert!(tally.due().is_empty());
        let dues = tally.fold(end(batch, members[0], MemberEnd::Completed));
        assert_eq!(due(&dues), [Callback::OnSuccess]);
    }

    #[test]
    fn an_ending_of_a_job_that_is_not_a_member_changes_nothing() {
        let (mut tally, batch, members) = opened_with_all_three(1);
        assert!(
            tally
                .fold(end(batch, Uuid::new_v4(), MemberEnd::Dead))
                .is_empty()
        );
        assert!(
            tally
                .fold(end(Uuid::new_v4(), members[0], MemberEnd::Dead))
                .is_empty()
        );
        assert_eq!(tally.view(batch).unwrap().pending, 1);
    }

    #[test]
    fn folding_the_log_again_from_the_start_gives_the_same_state() {
        let members: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        let open = opened(&members, all_three());
        let batch = open.batch;
        let mut log = vec![BatchRecord::Open(open)];
        log.extend(
            members
                .iter()
                .map(|id| end(batch, *id, MemberEnd::Completed)),
        );
        let mut tally = Tally::default();
        for record in log.iter().chain(&log) {
            tally.fold(record.clone());
        }
        let view = tally.view(batch).unwrap();
        assert_eq!((view.completed, view.pending), (5, 0));
    }

    #[test]
    fn a_member_that_adds_jobs_keeps_its_batch_open_until_they_end_too() {
        let (mut tally, batch, members) = opened_with_all_three(1);
        let added = [Uuid::new_v4(), Uuid::new_v4()];
        let add = BatchRecord::Add {
            batch,
            by: members[0],
            members: added.to_vec(),
        };
        tally.fold(add.clone());
        assert!(completes_quietly(&mut tally, batch, members[0]));
        assert!(completes_quietly(&mut tally, batch, added[0]));
        // The adding member run again: its add changes nothing.
        tally.fold(add.clone());
        let dues = tally.fold(end(batch, added[1], MemberEnd::Completed));
        assert_eq!(due(&dues), [Callback::OnSuccess, Callback::OnComplete]);
        assert_eq!(tally.view(batch).unwrap().total, 3);
        // Met again once the batch is done, it reopens nothing.
        tally.fold(add);
        assert_eq!(tally.view(batch).unwrap().pending, 0);
    }

    #[test]
    fn an_add_by_a_job_that_is_no_member_changes_nothing() {
        let (mut tally, batch, _) = opened_with_all_three(1);
        tally.fold(BatchRecord::Add {
            batch,
            by: Uuid::new_v4(),
            members: vec![Uuid::new_v4()],
        });
        assert_eq!(tally.view(batch).unwrap().total, 1);
    }

    #[test]
    fn past_its_bound_a_host_forgets_the_batches_opened_first() {
        let mut tally = Tally::default();
        let first = opened(&[Uuid::new_v4()], Callbacks::default());
        let first_id = first.batch;
        tally.fold(BatchRecord::Open(first));
        for _ in 0..BATCHES_KEPT {
            tally.fold(BatchRecord::Open(opened(
                &[Uuid::new_v4()],
                Callbacks::default(),
            )));
        }
        assert!(tally.view(first_id).is_none());
        assert_eq!(tally.views(usize::MAX).len(), BATCHES_KEPT);
    }
}
