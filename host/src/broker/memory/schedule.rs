//! [`Schedules`] in memory: the fleet is the schedulers sharing one [`MemoryBackend`]; the
//! lead is a lease on tokio's clock (so a scheduler that stops without resigning loses it
//! [`MEMORY_LEASE`] later, as a killed host's connection would), and each schedule's
//! history a bounded list.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;
use uuid::Uuid;

use super::MemoryBackend;
use crate::broker::BrokerError;
use crate::broker::schedule::{Ended, Firing, HISTORY, MEMORY_LEASE, Schedules, joined};

/// The lead and the histories of one memory backend.
#[derive(Debug, Default)]
pub(super) struct Board(Mutex<BoardState>);

#[derive(Debug, Default)]
struct BoardState {
    /// The leader and when its lease ends.
    leader: Option<(Uuid, Instant)>,
    history: HashMap<String, VecDeque<Firing>>,
    endings: HashMap<String, VecDeque<Ended>>,
}

/// Keep `record` last in `list`, which keeps the last [`HISTORY`].
fn keep<T>(list: &mut VecDeque<T>, record: T) {
    if list.len() == HISTORY {
        list.pop_front();
    }
    list.push_back(record);
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, BoardState> {
        // No code path panics while holding the lock, so a poisoned one is still consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Schedules for MemoryBackend {
    async fn lead(&self, candidate: Uuid) -> Result<bool, BrokerError> {
        let now = Instant::now();
        let mut board = self.schedules.lock();
        let free = board
            .leader
            .is_none_or(|(leader, until)| leader == candidate || until <= now);
        if free {
            board.leader = Some((candidate, now + MEMORY_LEASE));
        }
        Ok(free)
    }

    async fn resign(&self, candidate: Uuid) {
        let mut board = self.schedules.lock();
        if board.leader.is_some_and(|(leader, _)| leader == candidate) {
            board.leader = None;
        }
    }

    async fn record(&self, schedule: &str, firing: &Firing) -> Result<(), BrokerError> {
        let mut board = self.schedules.lock();
        keep(
            board.history.entry(schedule.to_owned()).or_default(),
            firing.clone(),
        );
        Ok(())
    }

    async fn record_end(&self, schedule: &str, ended: &Ended) -> Result<(), BrokerError> {
        let mut board = self.schedules.lock();
        keep(
            board.endings.entry(schedule.to_owned()).or_default(),
            ended.clone(),
        );
        Ok(())
    }

    async fn firings(&self, schedule: &str) -> Result<Vec<Firing>, BrokerError> {
        let board = self.schedules.lock();
        let firings = board
            .history
            .get(schedule)
            .map(|history| history.iter().cloned().collect())
            .unwrap_or_default();
        let endings: Vec<Ended> = board
            .endings
            .get(schedule)
            .map(|endings| endings.iter().cloned().collect())
            .unwrap_or_default();
        Ok(joined(firings, &endings))
    }
}
