//! The host's job slots (`--concurrency`): one per job running, across every queue it
//! consumes, and one of them kept by each queue for itself.
//!
//! # Contract
//! - At most `concurrency` jobs run at once, whatever the queues: a job holds a slot from
//!   when it starts until its delivery is settled.
//! - Every queue the host consumes keeps one slot of its own ([`QueueSlots`]) from its
//!   first job on, taken from the shared ones as soon as one is free, as long as the
//!   queues' own slots are at most half of all: a job takes its queue's own slot if it is
//!   free, else a shared one, whichever comes first. A queue that never gets a job keeps
//!   none, so one busy queue among idle ones has every slot.
//! - So a queue whose jobs can fill every shared slot (its prefetch at or above the
//!   concurrency) holds another queue's job back only while that queue's previous job
//!   runs. Without it, jobs that wait on the same thing (a thousand 1 s HTTP calls started
//!   together) give their slots back in waves, and another queue's job waited for the next
//!   wave: 100 ms at the median and 600 ms at p99 beside a saturated queue of 1,000 such
//!   jobs (BENCHMARKS.md, "Jobs that wait").
//! - A queue's own slot goes back to the shared ones when the host stops consuming the
//!   queue (its plugin removed or changed), once the job holding it (if any) is done. A
//!   paused queue is still consumed in this sense and keeps its slot, idle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The job slots of one host.
pub(super) struct Slots {
    shared: Arc<Semaphore>,
    /// Queues' own slots, taken or being taken.
    owned: Arc<AtomicUsize>,
    /// The most slots the queues may own together: half of all.
    ownable: usize,
}

impl Slots {
    pub(super) fn new(concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            shared: Arc::new(Semaphore::new(concurrency)),
            owned: Arc::new(AtomicUsize::new(0)),
            ownable: concurrency / 2,
        }
    }

    /// The slots of a queue the host starts consuming: the shared ones, and one of its own
    /// from its first job on, unless the queues own half of all already.
    pub(super) fn for_queue(&self) -> QueueSlots {
        QueueSlots {
            shared: Arc::clone(&self.shared),
            own: Arc::new(Semaphore::new(0)),
            taking: Mutex::new(Taking::NotYet),
            owned: Arc::clone(&self.owned),
            ownable: self.ownable,
        }
    }
}

/// Where a queue is in taking its own slot.
enum Taking {
    /// It has had no job yet: a queue that never gets one keeps no slot from the others.
    NotYet,
    /// The queues own half of the slots already.
    Never,
    /// A task takes it from the shared slots, or has.
    Started(JoinHandle<()>),
}

/// The slots a queue's jobs may take: its own, and the shared ones.
pub(super) struct QueueSlots {
    shared: Arc<Semaphore>,
    own: Arc<Semaphore>,
    taking: Mutex<Taking>,
    owned: Arc<AtomicUsize>,
    ownable: usize,
}

impl QueueSlots {
    /// A slot for one job: the queue's own if it is free, else the first of either.
    pub(super) async fn acquire(&self) -> OwnedSemaphorePermit {
        self.take_own();
        let slot = tokio::select! {
            biased;
            own = Arc::clone(&self.own).acquire_owned() => own,
            shared = Arc::clone(&self.shared).acquire_owned() => shared,
        };
        slot.expect("job slots are never closed")
    }

    /// On the queue's first job, start taking its own slot from the shared ones, as soon as
    /// one is free (on a busy host, when one of its jobs ends).
    fn take_own(&self) {
        let mut taking = self.taking.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*taking, Taking::NotYet) {
            return;
        }
        let may_own = self
            .owned
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |owned| {
                (owned < self.ownable).then_some(owned + 1)
            })
            .is_ok();
        *taking = if may_own {
            let (shared, own) = (Arc::clone(&self.shared), Arc::clone(&self.own));
            Taking::Started(tokio::spawn(async move {
                let slot = shared.acquire_owned().await;
                slot.expect("the shared slots are never closed").forget();
                own.add_permits(1);
            }))
        } else {
            Taking::Never
        };
    }

    /// Give the queue's own slot back to the shared ones, once the job holding it is done;
    /// in a task of its own, so a job running past the grace period holds up nothing.
    pub(super) fn release(self) {
        let taking = self
            .taking
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let Taking::Started(taking) = taking else {
            return;
        };
        let (shared, own, owned) = (self.shared, self.own, self.owned);
        tokio::spawn(async move {
            taking.abort();
            // Finished: the slot was taken, and is the queue's. Aborted: it never was.
            if taking.await.is_ok() {
                let slot = own.acquire_owned().await;
                slot.expect("a queue's own slot is never closed").forget();
                shared.add_permits(1);
            }
            owned.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Whether `slots` gives a slot within a second of tokio time.
    async fn gives_a_slot(slots: &QueueSlots) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(Duration::from_secs(1), slots.acquire())
            .await
            .ok()
    }

    /// `queue` has had a job, and so keeps its own slot from now on.
    async fn has_had_a_job(queue: &QueueSlots) {
        drop(gives_a_slot(queue).await.expect("a slot on a quiet host"));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_that_fills_every_shared_slot_leaves_another_queue_its_own() {
        let slots = Slots::new(4);
        let (busy, quiet) = (slots.for_queue(), slots.for_queue());
        has_had_a_job(&quiet).await;
        has_had_a_job(&busy).await;
        let mut held = Vec::new();
        while let Some(slot) = gives_a_slot(&busy).await {
            held.push(slot);
        }
        assert_eq!(
            held.len(),
            3,
            "the busy queue's own slot and the two shared ones"
        );
        let first = gives_a_slot(&quiet).await;
        assert!(first.is_some(), "the quiet queue's own slot is free");
        assert!(gives_a_slot(&quiet).await.is_none(), "and it has one only");
        drop(first);
        assert!(gives_a_slot(&quiet).await.is_some(), "its own slot is back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_that_never_had_a_job_keeps_no_slot_from_a_busy_one() {
        let slots = Slots::new(4);
        let (busy, _idle) = (slots.for_queue(), slots.for_queue());
        let mut held = Vec::new();
        while let Some(slot) = gives_a_slot(&busy).await {
            held.push(slot);
        }
        assert_eq!(held.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_queues_own_at_most_half_of_the_slots_and_give_them_back_when_they_stop() {
        let slots = Slots::new(4);
        let queues: Vec<QueueSlots> = (0..5).map(|_| slots.for_queue()).collect();
        for queue in &queues {
            has_had_a_job(queue).await;
        }
        assert_eq!(slots.owned.load(Ordering::Acquire), 2);
        assert_eq!(slots.shared.available_permits(), 2);
        let running = gives_a_slot(&queues[0]).await.expect("its own slot");
        for queue in queues {
            queue.release();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            slots.shared.available_permits(),
            3,
            "a queue's own slot goes back once its job is done"
        );
        drop(running);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(slots.shared.available_permits(), 4);
        assert_eq!(slots.owned.load(Ordering::Acquire), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_of_one_slot_keeps_it_shared() {
        let slots = Slots::new(1);
        let (a, b) = (slots.for_queue(), slots.for_queue());
        has_had_a_job(&a).await;
        let slot = gives_a_slot(&a).await.expect("the one slot");
        assert!(gives_a_slot(&b).await.is_none());
        drop(slot);
        assert!(gives_a_slot(&b).await.is_some());
    }
}
