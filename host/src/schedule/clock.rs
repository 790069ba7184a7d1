//! The scheduler's clock: the wall clock, or a wall time that runs on tokio's clock, so a
//! test under a paused clock steps through hours of ticks in milliseconds and starts on the
//! date it needs (a daylight-saving change, say).

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// What time it is, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// This machine's wall clock: what hosts of a fleet agree on, to their clock skew.
    System,
    /// `at_ms` at the tokio instant `since`, moving with tokio's clock from there.
    Anchored {
        /// The wall time at `since`.
        at_ms: i64,
        /// When it was that time.
        since: Instant,
    },
}

impl Clock {
    /// A clock that reads `at_ms` now and moves with tokio's clock.
    pub fn starting_at(at_ms: i64) -> Self {
        Self::Anchored {
            at_ms,
            since: Instant::now(),
        }
    }

    /// The time now.
    pub fn now_ms(&self) -> i64 {
        match self {
            Self::System => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| {
                    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
                }),
            Self::Anchored { at_ms, since } => {
                let elapsed = i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX);
                at_ms.saturating_add(elapsed)
            }
        }
    }

    /// The tokio instant at which this clock will read `at_ms` (now, if that is past).
    pub fn instant_at(&self, at_ms: i64) -> Instant {
        let ahead = at_ms.saturating_sub(self.now_ms()).max(0);
        Instant::now() + Duration::from_millis(u64::try_from(ahead).unwrap_or(0))
    }
}
