//! [`Control`] in memory: the fleet is the tasks sharing one [`MemoryBackend`]; the pause
//! marks are a set and the orders a log of the last [`MEMORY_ORDERS`], replayed to every
//! new follower, as RabbitMQ's stream replays its retention.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::MemoryBackend;
use crate::broker::control::{Command, Control, Followed, Follower, MEMORY_ORDERS, Order};
use crate::broker::{BrokerError, hold::check_queue_name};

/// The orders and the pause marks of one memory backend.
#[derive(Debug, Default)]
pub(super) struct Orders {
    log: Mutex<Log>,
    published: Notify,
}

#[derive(Debug, Default)]
struct Log {
    /// The kept orders; the first is order number `first`.
    kept: VecDeque<Order>,
    first: u64,
    paused: BTreeSet<String>,
}

impl Orders {
    fn lock(&self) -> MutexGuard<'_, Log> {
        // No code path panics while holding the lock, so a poisoned one is still consistent.
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Control for MemoryBackend {
    type Follower = MemoryFollower;

    async fn order(&self, order: &Order) -> Result<(), BrokerError> {
        let mut log = self.orders.lock();
        match &order.command {
            Command::Pause { queue } => {
                check_queue_name(queue)?;
                log.paused.insert(queue.clone());
            }
            Command::Resume { queue } => {
                check_queue_name(queue)?;
                log.paused.remove(queue);
            }
            Command::Cancel { .. } => {}
        }
        if log.kept.len() == MEMORY_ORDERS {
            log.kept.pop_front();
            log.first += 1;
        }
        log.kept.push_back(order.clone());
        drop(log);
        self.orders.published.notify_waiters();
        Ok(())
    }

    async fn is_paused(&self, queue: &str) -> Result<bool, BrokerError> {
        Ok(self.orders.lock().paused.contains(queue))
    }

    async fn follow(&self) -> Result<MemoryFollower, BrokerError> {
        Ok(MemoryFollower {
            orders: Arc::clone(&self.orders),
            next: None,
        })
    }
}

/// A follower of a memory backend's orders: [`Followed::Joined`] first, then every kept
/// order from the oldest, then each new one.
#[derive(Debug)]
pub struct MemoryFollower {
    orders: Arc<Orders>,
    /// The number of the next order to hand on; `None` before joining.
    next: Option<u64>,
}

impl Follower for MemoryFollower {
    async fn next(&mut self) -> Option<Followed> {
        let Some(next) = self.next else {
            self.next = Some(self.orders.lock().first);
            return Some(Followed::Joined);
        };
        loop {
            let published = self.orders.published.notified();
            tokio::pin!(published);
            published.as_mut().enable();
            {
                let log = self.orders.lock();
                // Orders dropped from the log before this follower read them are lost to
                // it, as orders past a stream's retention are.
                let next = next.max(log.first);
                let index = usize::try_from(next - log.first).unwrap_or(usize::MAX);
                if let Some(order) = log.kept.get(index) {
                    self.next = Some(next + 1);
                    return Some(Followed::Order(order.clone()));
                }
            }
            published.await;
        }
    }
}
