//! Which ticks of a schedule to fire now, and which to let go: a pure function of the
//! schedule's timing, its missed policy, the last tick known fired and the time.
//!
//! A tick is **on time** while it is less than [`ON_TIME`] old: a leader that took over
//! within that time fires it, late. An older tick that no one fired is **missed**: `skip`
//! lets every missed tick go; `catch_up = N` fires the most recent N missed ticks, oldest
//! first, and lets the older ones go.

use std::time::Duration;

use crate::job::{Missed, Timing};

/// How old a tick may be and still fire as if on time.
pub const ON_TIME: Duration = Duration::from_secs(5);

/// How many on-time ticks are fired at most in one pass: ticks a second apart fit five.
const ON_TIME_MAX: usize = 64;

/// What to do about a schedule now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The ticks to fire, oldest first.
    pub fire: Vec<i64>,
    /// How many missed ticks are let go.
    pub missed: u64,
    /// The newest tick let go, when some are.
    pub missed_through: Option<i64>,
}

/// The ticks after `last` up to `now_ms` to fire (see the [module doc](self)).
pub fn due(timing: &Timing, missed: Missed, last: i64, now_ms: i64) -> Due {
    let on_time_ms = i64::try_from(ON_TIME.as_millis()).unwrap_or(i64::MAX);
    // Ticks at or before `late_until` are missed.
    let late_until = now_ms.saturating_sub(on_time_ms).max(last);
    let keep = match missed {
        Missed::Skip => 0,
        Missed::CatchUp(n) => n as usize,
    };
    let (late, mut fire) = timing.ticks_between(last, late_until, keep);
    let (_, on_time) = timing.ticks_between(late_until, now_ms, ON_TIME_MAX);
    let let_go = late - fire.len() as u64;
    // The newest tick let go is the one before the first caught up, or the newest late one.
    let missed_through = (let_go > 0)
        .then(|| {
            let through = fire.first().map_or(late_until, |first| first - 1);
            timing.ticks_between(last, through, 1).1.first().copied()
        })
        .flatten();
    fire.extend(on_time);
    Due {
        fire,
        missed: let_go,
        missed_through,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1000;

    fn every_second() -> Timing {
        Timing::Every(Duration::from_secs(1))
    }

    #[test]
    fn the_tick_now_fires_and_nothing_before_the_last_one_fires_again() {
        let due = due(&every_second(), Missed::Skip, 10 * SECOND, 11 * SECOND);
        assert_eq!(due.fire, vec![11 * SECOND]);
        assert_eq!(due.missed, 0);
        let due = super::due(
            &every_second(),
            Missed::Skip,
            11 * SECOND,
            11 * SECOND + 999,
        );
        assert!(due.fire.is_empty(), "{due:?}");
    }

    #[test]
    fn ticks_younger_than_on_time_fire_late_even_under_skip() {
        let due = due(
            &every_second(),
            Missed::Skip,
            10 * SECOND,
            13 * SECOND + 500,
        );
        assert_eq!(due.fire, vec![11 * SECOND, 12 * SECOND, 13 * SECOND]);
        assert_eq!(due.missed, 0);
    }

    #[test]
    fn skip_lets_every_missed_tick_go_and_says_through_which() {
        let due = due(&every_second(), Missed::Skip, 0, 100 * SECOND);
        assert_eq!(due.missed, 95, "ticks 1..=95 s are more than 5 s old");
        assert_eq!(due.missed_through, Some(95 * SECOND));
        assert_eq!(due.fire, (96..=100).map(|s| s * SECOND).collect::<Vec<_>>());
    }

    #[test]
    fn catch_up_fires_the_most_recent_n_missed_ticks_oldest_first() {
        let due = due(&every_second(), Missed::CatchUp(3), 0, 100 * SECOND);
        assert_eq!(due.missed, 92);
        assert_eq!(due.missed_through, Some(92 * SECOND));
        assert_eq!(
            due.fire,
            [93, 94, 95, 96, 97, 98, 99, 100]
                .map(|s| s * SECOND)
                .to_vec()
        );
        let all = super::due(&every_second(), Missed::CatchUp(1000), 0, 100 * SECOND);
        assert_eq!(
            (all.fire.len(), all.missed, all.missed_through),
            (100, 0, None)
        );
    }
}
