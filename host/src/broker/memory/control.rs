//! [`Control`] in memory: the fleet is the tasks sharing one [`MemoryBackend`]; the pause
//! marks are a set and the orders a [`Log`] of the last [`MEMORY_ORDERS`], replayed to
//! every new follower, as RabbitMQ's stream replays its retention.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use super::MemoryBackend;
use super::log::{Log, Reader};
use crate::broker::control::{Command, Control, Followed, Follower, MEMORY_ORDERS, Order};
use crate::broker::{BrokerError, hold::check_queue_name};

/// The orders and the pause marks of one memory backend.
#[derive(Debug)]
pub(super) struct Orders {
    log: Arc<Log<Order>>,
    paused: Mutex<BTreeSet<String>>,
}

impl Default for Orders {
    fn default() -> Self {
        Self {
            log: Arc::new(Log::new(MEMORY_ORDERS)),
            paused: Mutex::default(),
        }
    }
}

impl Orders {
    fn paused(&self) -> MutexGuard<'_, BTreeSet<String>> {
        // No code path panics while holding the lock, so a poisoned one is still consistent.
        self.paused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Control for MemoryBackend {
    type Follower = MemoryFollower;

    async fn order(&self, order: &Order) -> Result<(), BrokerError> {
        // The mark before the order, as on RabbitMQ: the mark is the truth.
        match &order.command {
            Command::Pause { queue } => {
                check_queue_name(queue)?;
                self.orders.paused().insert(queue.clone());
            }
            Command::Resume { queue } => {
                check_queue_name(queue)?;
                self.orders.paused().remove(queue);
            }
            Command::Cancel { .. } => {}
        }
        self.orders.log.append(order.clone());
        Ok(())
    }

    async fn is_paused(&self, queue: &str) -> Result<bool, BrokerError> {
        Ok(self.orders.paused().contains(queue))
    }

    async fn follow(&self) -> Result<MemoryFollower, BrokerError> {
        Ok(MemoryFollower {
            log: Arc::clone(&self.orders.log),
            reader: None,
        })
    }
}

/// A follower of a memory backend's orders: [`Followed::Joined`] first, then every kept
/// order from the oldest, then each new one.
#[derive(Debug)]
pub struct MemoryFollower {
    log: Arc<Log<Order>>,
    /// `None` before joining.
    reader: Option<Reader<Order>>,
}

impl Follower for MemoryFollower {
    async fn next(&mut self) -> Option<Followed> {
        let Some(reader) = &mut self.reader else {
            self.reader = Some(Reader::new(Arc::clone(&self.log)));
            return Some(Followed::Joined);
        };
        Some(Followed::Order(reader.next().await))
    }
}
