//! An append-only log in memory that many readers follow, as a RabbitMQ stream: the last
//! `keep` entries are kept, a new reader starts at the oldest kept, and a reader that fell
//! behind past what is kept loses what was dropped, as a stream's reader loses what is past
//! its retention.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The log: entries kept, and a wake-up for readers waiting on the next.
#[derive(Debug)]
pub(super) struct Log<T> {
    kept: Mutex<Kept<T>>,
    appended: Notify,
    keep: usize,
}

#[derive(Debug)]
struct Kept<T> {
    /// The kept entries; the first is entry number `first`.
    entries: VecDeque<T>,
    first: u64,
}

impl<T: Clone> Log<T> {
    /// An empty log that keeps the last `keep` entries.
    pub(super) fn new(keep: usize) -> Self {
        Self {
            kept: Mutex::new(Kept {
                entries: VecDeque::new(),
                first: 0,
            }),
            appended: Notify::new(),
            keep,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Kept<T>> {
        // No code path panics while holding the lock, so a poisoned one is still consistent.
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Append `entry`, dropping the oldest past `keep`, and wake every reader.
    pub(super) fn append(&self, entry: T) {
        let mut kept = self.lock();
        if kept.entries.len() == self.keep {
            kept.entries.pop_front();
            kept.first += 1;
        }
        kept.entries.push_back(entry);
        drop(kept);
        self.appended.notify_waiters();
    }
}

/// A reader of a [`Log`], from the oldest entry kept when it was made.
#[derive(Debug)]
pub(super) struct Reader<T> {
    log: Arc<Log<T>>,
    next: u64,
}

impl<T: Clone> Reader<T> {
    /// A reader of `log` from its oldest kept entry.
    pub(super) fn new(log: Arc<Log<T>>) -> Self {
        let next = log.lock().first;
        Self { log, next }
    }

    /// The next entry, waiting for one.
    pub(super) async fn next(&mut self) -> T {
        loop {
            let appended = self.log.appended.notified();
            tokio::pin!(appended);
            appended.as_mut().enable();
            {
                let kept = self.log.lock();
                let next = self.next.max(kept.first);
                let index = usize::try_from(next - kept.first).unwrap_or(usize::MAX);
                if let Some(entry) = kept.entries.get(index) {
                    self.next = next + 1;
                    return entry.clone();
                }
            }
            appended.await;
        }
    }
}
