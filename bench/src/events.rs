//! Counting events as they happen, for their rate over the span they took.

use std::sync::Mutex;
use std::time::Instant;

/// Events recorded from any task: how many, and when the first and the last happened.
#[derive(Debug, Default)]
pub(crate) struct Events(Mutex<Option<Seen>>);

#[derive(Debug, Clone, Copy)]
struct Seen {
    count: u64,
    first: Instant,
    last: Instant,
}

impl Events {
    /// One event, now.
    pub(crate) fn record(&self) {
        let now = Instant::now();
        let mut seen = self.0.lock().expect("events lock");
        *seen = Some(seen.map_or(
            Seen {
                count: 1,
                first: now,
                last: now,
            },
            // Two tasks can take the lock in the other order than they read the clock.
            |seen| Seen {
                count: seen.count + 1,
                first: seen.first.min(now),
                last: seen.last.max(now),
            },
        ));
    }

    /// Events per second between the first and the last; none until two apart in time.
    pub(crate) fn rate(&self) -> Option<f64> {
        let seen = (*self.0.lock().expect("events lock"))?;
        let span = seen.last.duration_since(seen.first).as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let count = seen.count as f64;
        (span > 0.0).then(|| count / span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rate_is_given_before_any_event() {
        assert_eq!(Events::default().rate(), None);
    }

    #[test]
    fn the_rate_counts_every_event_over_the_span_from_the_first_to_the_last() {
        let events = Events::default();
        events.record();
        std::thread::sleep(std::time::Duration::from_millis(20));
        events.record();
        events.record();
        let rate = events.rate().expect("two events apart in time");
        let seen = events.0.lock().unwrap().expect("recorded");
        let span = seen.last.duration_since(seen.first).as_secs_f64();
        assert_eq!(seen.count, 3);
        assert!(
            (rate - 3.0 / span).abs() < 1e-9,
            "{rate} per second over {span} s"
        );
    }
}
