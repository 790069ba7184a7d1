//! Unique locks in memory: each lock's holder and when it ends, on tokio's clock, so a
//! test under a paused clock sees a lock end exactly `for` after it was taken.

use std::collections::HashMap;

use tokio::time::Instant;
use uuid::Uuid;

use crate::broker::{Taken, UniqueLock};

/// The locks held now, by name.
#[derive(Debug, Default)]
pub(super) struct Locks(HashMap<String, Holder>);

#[derive(Debug)]
struct Holder {
    job_id: Uuid,
    until: Instant,
}

impl Locks {
    /// Take `lock` for `job_id` unless another job holds it. Ended locks are forgotten
    /// first, so the map holds only live locks, as the broker's lock queues would.
    pub(super) fn take(&mut self, lock: &UniqueLock, job_id: Uuid, now: Instant) -> Taken {
        self.0.retain(|_, holder| holder.until > now);
        match self.0.get(lock.name()) {
            Some(holder) if holder.job_id != job_id => Taken::HeldBy(Some(holder.job_id)),
            Some(_) => Taken::Ours,
            None => {
                let until = now + lock.lasts();
                self.0
                    .insert(lock.name().to_owned(), Holder { job_id, until });
                Taken::Ours
            }
        }
    }

    /// Let go of `lock` if `job_id` holds it.
    pub(super) fn release(&mut self, lock: &UniqueLock, job_id: Uuid) {
        if self
            .0
            .get(lock.name())
            .is_some_and(|holder| holder.job_id == job_id)
        {
            self.0.remove(lock.name());
        }
    }
}
