//! A plugin's request slots: `max_concurrent_requests` permits shared by all its jobs, one
//! set per plugin for the life of the host.
//!
//! A grants reload keeps the set and resizes it ([`RequestSlots::resize`]) instead of making
//! a new one, because requests already in flight hold permits of the old set: a new set
//! would let the next jobs take `max_concurrent_requests` more. Shrinking below what is in
//! flight takes the surplus back as those requests end.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Semaphore;

/// The permits of one plugin's requests in flight.
#[derive(Debug)]
pub struct RequestSlots {
    semaphore: Semaphore,
    /// The limit, and how many permits in flight are to be taken back when they return
    /// (what a shrink could not take from the free ones).
    state: Mutex<SlotsState>,
}

#[derive(Debug)]
struct SlotsState {
    limit: usize,
    owed: usize,
}

/// One request's slot, returned (or taken back after a shrink) when dropped.
#[derive(Debug)]
pub struct RequestPermit {
    slots: Arc<RequestSlots>,
}

impl RequestSlots {
    /// `limit` slots, all free.
    pub(super) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            semaphore: Semaphore::new(limit),
            state: Mutex::new(SlotsState { limit, owed: 0 }),
        })
    }

    /// Wait for a free slot.
    pub async fn acquire(self: &Arc<Self>) -> RequestPermit {
        self.semaphore
            .acquire()
            .await
            .expect("a plugin's request semaphore is never closed")
            .forget();
        RequestPermit {
            slots: Arc::clone(self),
        }
    }

    /// How many requests may start now without waiting.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// The limit in force.
    pub fn limit(&self) -> usize {
        self.state().limit
    }

    /// Make the limit `limit`: more slots are free at once; fewer are taken from the free
    /// ones, and the rest from requests in flight as they end.
    pub(super) fn resize(&self, limit: usize) {
        let mut state = self.state();
        if limit > state.limit {
            let more = limit - state.limit;
            let repaid = more.min(state.owed);
            state.owed -= repaid;
            self.semaphore.add_permits(more - repaid);
        } else {
            let fewer = state.limit - limit;
            let taken = self.semaphore.forget_permits(fewer);
            state.owed += fewer - taken;
        }
        state.limit = limit;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlotsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for RequestPermit {
    fn drop(&mut self) {
        let mut state = self.slots.state();
        if state.owed > 0 {
            state.owed -= 1;
        } else {
            self.slots.semaphore.add_permits(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shrink_below_what_is_in_flight_takes_the_surplus_back_as_requests_end() {
        let slots = RequestSlots::new(3);
        let (a, b, c) = (
            slots.acquire().await,
            slots.acquire().await,
            slots.acquire().await,
        );
        slots.resize(1);
        assert_eq!(slots.limit(), 1);
        drop(a);
        drop(b);
        assert_eq!(
            slots.available(),
            0,
            "two of three in flight were owed back"
        );
        drop(c);
        assert_eq!(slots.available(), 1);
    }

    #[tokio::test]
    async fn a_growth_first_cancels_what_a_shrink_still_owes() {
        let slots = RequestSlots::new(2);
        let (a, b) = (slots.acquire().await, slots.acquire().await);
        slots.resize(1);
        slots.resize(3);
        assert_eq!(slots.available(), 1, "3 slots, 2 in flight");
        drop(a);
        drop(b);
        assert_eq!(slots.available(), 3);
    }
}
