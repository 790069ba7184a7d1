//! The hold queues this backend publishes into, in one registry. Hold queues are named
//! after their delays, which the broker cannot list over AMQP, so the backend remembers
//! each one it published into, and three things read that:
//! - a publish declares its hold queue unless a declaration sent on the same session less
//!   than half a delay ago still covers it ([`Holds::covered`]). Only a declaration, not a
//!   publish, resets a hold queue's expiry: a message published at `t` needs the queue to
//!   live until `t + ttl`, and a declaration keeps it until `2 * ttl` after it, so one sent
//!   less than `ttl / 2` before `t` covers the message with half a delay to spare and saves
//!   a broker round trip per retry;
//! - a depth counts their messages ([`Holds::of`]); a hold queue of an earlier process is
//!   not counted until this one publishes into it again;
//! - the sweeper (`sweep`) looks at each one ([`Holds::to_sweep`]) and tells the registry
//!   what it found ([`Holds::swept`]).
//!
//! Contract: a hold queue is listed from its first declaration until it can hold nothing
//! any more: it has not been published into for its `x-expires`, and the sweeper found it
//! gone, or empty for longer than a message could stay away without being overdue
//! ([`Seen::done`]). A queue that stopped expiring is kept alive by the sweeps' gets, so it
//! stays listed while it holds anything. Because a guest may defer by any delay, at most
//! [`MAX_HOLD_QUEUES`] are listed per work queue; beyond that, the one published into
//! longest ago is let go (its messages go uncounted and unswept).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::broker::HoldQueue;

/// The most hold queues listed per work queue.
pub(super) const MAX_HOLD_QUEUES: usize = 64;

/// How much longer than its delay a message must have been held before the sweeper
/// releases it: well above the broker's own lateness under load, so the sweeper never
/// races a healthy hold queue, and above the second the `timestamp` rounds away.
pub(super) const OVERDUE_GRACE: Duration = Duration::from_secs(5);

/// The hold queues published into through one backend, by name.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<String, Hold>>);

/// One hold queue, as the backend knows it.
#[derive(Debug, Clone)]
pub(super) struct Hold {
    /// The work queue it releases onto.
    pub(super) queue: String,
    pub(super) hold: HoldQueue,
    /// When it was last published into (or declared for a publish).
    used: Instant,
    /// The session generation its last confirmed declaration was sent on, and when.
    declared: Option<(u64, Instant)>,
    /// What the sweeper has seen of it.
    pub(super) seen: Seen,
}

/// What the sweeper has seen of one hold queue.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    /// The head without a usable timestamp seen last, by a hash of its body, and when
    /// the sweeper first saw it at the head.
    pub(super) head: Option<(u64, Instant)>,
    /// Since when every sweep found it empty, or that one found it gone.
    empty: Option<(Instant, Found)>,
}

/// What a get from a hold queue found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// A head, released or handed back.
    #[default]
    Head,
    /// Nothing ready.
    Empty,
    /// No queue: it expired or was deleted.
    Gone,
}

impl Holds {
    /// Whether a declaration of `hold` sent on session `generation` still covers a
    /// publish at `now` (see the module doc).
    pub(super) fn covered(&self, hold: &HoldQueue, generation: u64, now: Instant) -> bool {
        let fresh = Duration::from_millis(hold.ttl_ms / 2);
        self.lock().get(&hold.name).is_some_and(|known| {
            known.declared.is_some_and(|(on, sent)| {
                on == generation && now.saturating_duration_since(sent) < fresh
            })
        })
    }

    /// A declaration of `hold`, in front of `queue`, sent on session `generation` at
    /// `sent`, was confirmed. Recorded only once confirmed, so a concurrent publish never
    /// skips a declaration that has not reached the broker yet.
    pub(super) fn declared(&self, queue: &str, hold: &HoldQueue, generation: u64, sent: Instant) {
        self.touch(queue, hold, sent, |known| {
            known.declared = Some((generation, sent))
        });
    }

    /// The broker returned a publish to `hold`, so it is gone (deleted, or expired behind
    /// our back): the next publish declares it again.
    pub(super) fn forget_declaration(&self, hold: &HoldQueue) {
        if let Some(known) = self.lock().get_mut(&hold.name) {
            known.declared = None;
        }
    }

    /// `hold`, in front of `queue`, was published into now: it holds something again.
    pub(super) fn used(&self, queue: &str, hold: &HoldQueue) {
        self.touch(queue, hold, Instant::now(), |known| known.seen.empty = None);
    }

    /// The names of `queue`'s hold queues that may still hold messages.
    pub(super) fn of(&self, queue: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .lock()
            .values()
            .filter(|known| known.queue == queue)
            .map(|known| known.hold.name.clone())
            .collect();
        names.sort_unstable();
        names
    }

    /// Every hold queue listed, as the sweeper should look at it.
    pub(super) fn to_sweep(&self) -> Vec<Hold> {
        self.lock().values().cloned().collect()
    }

    /// The sweeper looked at `hold` and has seen `seen` of it so far.
    pub(super) fn swept(&self, hold: &HoldQueue, seen: Seen) {
        if let Some(known) = self.lock().get_mut(&hold.name) {
            known.seen = seen;
        }
    }

    /// Let go, at `now`, of every hold queue that can hold nothing any more.
    pub(super) fn prune(&self, now: Instant) {
        self.lock().retain(|_, known| {
            alive(&known.hold, known.used, now) || !known.seen.done(&known.hold, now)
        });
    }

    /// Mark `hold`, in front of `queue`, used at `now` and `change` it; listed if new,
    /// letting go of `queue`'s hold queue used longest ago when it has [`MAX_HOLD_QUEUES`].
    fn touch(&self, queue: &str, hold: &HoldQueue, now: Instant, change: impl FnOnce(&mut Hold)) {
        let mut all = self.lock();
        if !all.contains_key(&hold.name) {
            let oldest = all
                .iter()
                .filter(|(_, known)| known.queue == queue)
                .map(|(name, known)| (known.used, name))
                .min();
            let listed = all.values().filter(|known| known.queue == queue).count();
            if listed >= MAX_HOLD_QUEUES
                && let Some((_, oldest)) = oldest
            {
                let oldest = oldest.clone();
                all.remove(&oldest);
            }
            let new = Hold {
                queue: queue.to_owned(),
                hold: hold.clone(),
                used: now,
                declared: None,
                seen: Seen::default(),
            };
            all.insert(hold.name.clone(), new);
        }
        let known = all.get_mut(&hold.name).expect("listed above");
        known.used = known.used.max(now);
        change(known);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hold>> {
        self.0.lock().expect("hold queue registry poisoned")
    }
}

/// Whether `hold`, last used at `used`, may still exist at `now` by itself: the broker
/// deletes it once unused for its `x-expires`.
fn alive(hold: &HoldQueue, used: Instant, now: Instant) -> bool {
    now.saturating_duration_since(used) < Duration::from_millis(hold.expires_ms())
}

impl Seen {
    /// A sweep at `now` found what `found` says.
    pub(super) fn found(&mut self, found: Found, now: Instant) {
        match found {
            Found::Head => self.empty = None,
            Found::Empty => {
                self.empty.get_or_insert((now, Found::Empty));
            }
            Found::Gone => self.empty = Some((now, Found::Gone)),
        }
    }

    /// Whether, at `now`, `hold` needs no more sweeps until a publish into it: it is gone,
    /// or it has been found empty for longer than a message that was out (with another
    /// host's sweeper, or on its way back) could stay away without being overdue by then.
    fn done(&self, hold: &HoldQueue, now: Instant) -> bool {
        let quiet = Duration::from_millis(hold.ttl_ms) + OVERDUE_GRACE;
        match self.empty {
            Some((_, Found::Gone)) => true,
            Some((since, _)) => now.saturating_duration_since(since) > quiet,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hold queue of `queue` for `secs` seconds, named as the backend names it.
    fn hold(queue: &str, secs: u64) -> HoldQueue {
        HoldQueue {
            name: format!("{queue}.deferred.{}", secs * 1000),
            ttl_ms: secs * 1000,
        }
    }

    fn seen(holds: &Holds, hold: &HoldQueue) -> Seen {
        let listed = holds.to_sweep();
        let known = listed.iter().find(|known| known.hold == *hold);
        known.expect("listed").seen.clone()
    }

    #[test]
    fn a_declaration_covers_publishes_on_its_session_for_half_a_delay() {
        let holds = Holds::default();
        let hold = hold("q", 10);
        let sent = Instant::now();
        assert!(!holds.covered(&hold, 1, sent), "never declared");
        holds.declared("q", &hold, 1, sent);
        assert!(holds.covered(&hold, 1, sent + Duration::from_millis(4_999)));
        assert!(!holds.covered(&hold, 1, sent + Duration::from_secs(5)));
        assert!(
            !holds.covered(&hold, 2, sent),
            "a new session declares again"
        );
        holds.forget_declaration(&hold);
        assert!(
            !holds.covered(&hold, 1, sent),
            "a returned publish declares again"
        );
    }

    #[test]
    fn hold_queues_are_listed_per_work_queue_and_bounded_the_latest_kept() {
        let holds = Holds::default();
        for secs in 1..=(MAX_HOLD_QUEUES as u64 + 10) {
            holds.used("q", &hold("q", secs));
        }
        holds.used("other", &hold("other", 1));
        let of_q = holds.of("q");
        assert_eq!(of_q.len(), MAX_HOLD_QUEUES, "at most the bound per queue");
        let latest = hold("q", MAX_HOLD_QUEUES as u64 + 10).name;
        assert!(of_q.contains(&latest), "the latest is kept: {of_q:?}");
        assert!(!of_q.contains(&hold("q", 1).name), "the oldest is let go");
        assert_eq!(holds.of("other"), vec![hold("other", 1).name]);
        assert!(holds.of("unknown").is_empty());
    }

    #[test]
    fn a_hold_queue_published_into_again_is_listed_once_with_what_the_sweeper_saw_of_its_head() {
        let holds = Holds::default();
        let hold = hold("q", 1);
        holds.used("q", &hold);
        let head = Some((7, Instant::now()));
        holds.swept(&hold, Seen { head, empty: None });
        holds.used("q", &hold);
        assert_eq!(holds.to_sweep().len(), 1);
        assert_eq!(seen(&holds, &hold).head, head);
    }

    #[test]
    fn a_queue_found_empty_is_swept_on_until_it_has_been_empty_for_its_delay_and_the_grace() {
        let mut seen = Seen::default();
        let hold = hold("q", 1);
        let quiet = Duration::from_secs(1) + OVERDUE_GRACE;
        let first = Instant::now();
        seen.found(Found::Empty, first);
        seen.found(Found::Empty, first + quiet);
        assert!(!seen.done(&hold, first + quiet), "a head may still be out");
        assert!(seen.done(&hold, first + quiet + Duration::from_millis(1)));
    }

    #[test]
    fn a_head_found_again_starts_the_quiet_time_over() {
        let mut seen = Seen::default();
        let hold = hold("q", 1);
        let quiet = Duration::from_secs(1) + OVERDUE_GRACE;
        let first = Instant::now();
        seen.found(Found::Empty, first);
        // Its head was out with another host's sweeper, and came back.
        seen.found(Found::Head, first + quiet);
        let later = first + quiet + Duration::from_secs(1);
        seen.found(Found::Empty, later);
        assert!(!seen.done(&hold, later + quiet));
        assert!(seen.done(&hold, later + quiet + Duration::from_millis(1)));
    }

    #[test]
    fn a_queue_found_gone_needs_no_more_sweeps() {
        let mut seen = Seen::default();
        let now = Instant::now();
        seen.found(Found::Gone, now);
        assert!(seen.done(&hold("q", 1), now));
    }

    #[test]
    fn a_hold_queue_is_let_go_only_once_unused_for_its_expiry_and_done_with() {
        let holds = Holds::default();
        let hold = hold("q", 1);
        let start = Instant::now();
        holds.used("q", &hold);
        let expired = start + Duration::from_millis(hold.expires_ms()) + Duration::from_secs(1);
        holds.prune(expired);
        assert_eq!(
            holds.of("q"),
            vec![hold.name.clone()],
            "it may still hold messages"
        );
        let mut found = seen(&holds, &hold);
        found.found(Found::Empty, start);
        holds.swept(&hold, found.clone());
        holds.prune(start);
        assert_eq!(holds.of("q").len(), 1, "still in use");
        found.found(Found::Gone, expired);
        holds.swept(&hold, found);
        holds.prune(expired);
        assert!(holds.of("q").is_empty());
    }
}
