//! Token queues in memory: a token bucket per token queue on tokio's clock, so a rate limit
//! holds among the workers of one process as it holds across a fleet on RabbitMQ, and tests
//! run it under a paused clock.
//!
//! Each bucket keeps the moment it would be full again (the generic cell rate algorithm):
//! a take is due when that moment is at most `burst - 1` intervals away, and moves it one
//! interval on. A bucket that is full again is forgotten, as RabbitMQ forgets an unused
//! token queue, so a long-running host whose jobs bring ever new keys keeps only the keys
//! in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::broker::Tokens;

/// Buckets kept before a take sweeps away the full ones.
const SWEEP_AT: usize = 1024;

/// When each token bucket is full again. Clones share the buckets.
#[derive(Debug, Clone, Default)]
pub(super) struct TokenTable(Arc<Mutex<HashMap<String, Instant>>>);

impl TokenTable {
    /// Whether a token of `tokens` is due now; if so, it is spent.
    pub(super) fn take(&self, tokens: &Tokens) -> bool {
        // No code path panics while holding it, so its moments stay consistent.
        let mut full_at = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if full_at.len() >= SWEEP_AT {
            full_at.retain(|_, at| *at > now);
        }
        let at = full_at.get(&tokens.name).copied().unwrap_or(now).max(now);
        let saved_up = tokens.interval * tokens.burst.saturating_sub(1);
        if at > now + saved_up {
            return false;
        }
        full_at.insert(tokens.name.clone(), at + tokens.interval);
        true
    }

    /// Give out no token of `tokens` for `delay`, none of those saved up either: the
    /// bucket is full again only once a whole burst has come after `delay`, so the first
    /// token is due when `delay` ends and the next ones at the rate.
    pub(super) fn hold(&self, tokens: &Tokens, delay: Duration) {
        let mut full_at = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let saved_up = tokens.interval * tokens.burst.saturating_sub(1);
        let held = Instant::now() + delay + saved_up;
        let at = full_at.entry(tokens.name.clone()).or_insert(held);
        *at = (*at).max(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_bucket_gives_its_burst_then_one_token_per_interval() {
        let table = TokenTable::default();
        let tokens = Tokens::for_queue("q", Duration::from_millis(200), 3);
        let taken = |table: &TokenTable| (0..10).filter(|_| table.take(&tokens)).count();
        assert_eq!(taken(&table), 3, "the burst at once");
        tokio::time::advance(Duration::from_millis(199)).await;
        assert_eq!(taken(&table), 0, "not yet due");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(taken(&table), 1, "one interval, one token");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(taken(&table), 3, "never more than the burst saved up");
        let other = Tokens::for_queue("r", Duration::from_millis(200), 3);
        assert!(table.take(&other), "another scope has its own bucket");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_bucket_gives_nothing_until_the_hold_ends_then_one_token_per_interval() {
        let table = TokenTable::default();
        let tokens = Tokens::for_queue("q", Duration::from_millis(200), 3);
        let taken = |table: &TokenTable| (0..10).filter(|_| table.take(&tokens)).count();
        assert!(table.take(&tokens), "a full bucket gives");
        table.hold(&tokens, Duration::from_secs(5));
        assert_eq!(taken(&table), 0, "its saved-up tokens went with the hold");
        tokio::time::advance(Duration::from_millis(4_999)).await;
        assert_eq!(taken(&table), 0, "held until the hold ends");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(taken(&table), 1, "one token when it ends, not a burst");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(taken(&table), 1, "then one per interval");
        table.hold(&tokens, Duration::from_secs(1));
        table.hold(&tokens, Duration::from_millis(10));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(taken(&table), 0, "a shorter hold does not end a longer one");
    }
}
