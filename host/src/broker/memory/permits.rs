//! Permit queues in memory: a count of held permits per permit queue, so a cap holds among
//! the workers of one process exactly as it holds across a fleet on RabbitMQ.
//!
//! A permit queue with no permit held is forgotten, as RabbitMQ forgets one that expires,
//! so a long-running host whose jobs bring ever new keys keeps only the keys in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::Permits;

/// How many permits of each permit queue are held. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub(super) struct PermitTable(Arc<Mutex<HashMap<String, u32>>>);

impl PermitTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        // No code path panics while holding it, so its counts stay consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A permit of `permits`, unless `limit` are held.
    pub(super) fn take(&self, permits: &Permits) -> Option<MemoryLease> {
        let mut held = self.lock();
        let count = held.entry(permits.name.clone()).or_default();
        if *count >= permits.limit {
            return None;
        }
        *count += 1;
        Some(MemoryLease {
            table: self.clone(),
            name: permits.name.clone(),
        })
    }

    /// How many permits of `permits` are held now.
    pub(super) fn held(&self, permits: &Permits) -> u32 {
        self.lock().get(&permits.name).copied().unwrap_or(0)
    }
}

/// One held permit of the memory backend, given back when dropped.
#[derive(Debug)]
pub struct MemoryLease {
    table: PermitTable,
    name: String,
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        let mut held = self.table.lock();
        if let Some(count) = held.get_mut(&self.name) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.name);
            }
        }
    }
}
