//! The dashboard's logins and sessions: one-time login tokens, minted for the holder of the
//! admin token, each exchanged for a session of its own that expires.
//!
//! # Contract
//! - A **login token** opens one session, once, within [`LOGIN_LIFETIME`] of being minted;
//!   at most [`MAX_PENDING_LOGINS`] wait at once (minting another drops the oldest).
//! - A **session** is good for [`SESSION_LIFETIME`] after its login, however it is used;
//!   at most [`MAX_SESSIONS`] are open at once (a login beyond drops the oldest session).
//! - Only digests of the secrets are kept, and every comparison is between digests, so the
//!   time a check takes says nothing about how much of a guess is right.
//! - The store takes the time from its caller, so expiry is tested with a fake clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

/// How long a login link works after `jobhost dashboard` asked for it: long enough to
/// open it, short enough that one found later in a terminal's scrollback opens nothing.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// How long a dashboard session lasts after its login: a working day; then the browser
/// needs a fresh link from `jobhost dashboard`.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// The most login links waiting to be opened.
pub const MAX_PENDING_LOGINS: usize = 16;
/// The most dashboard sessions open at once.
pub const MAX_SESSIONS: usize = 32;

/// The SHA-256 digest of a secret: what the store keeps, and what names a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SessionId([u8; 32]);

impl SessionId {
    fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret).into())
    }
}

/// A secret's digest and when it stops working.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: SessionId,
    expires: Instant,
}

/// Pending logins and open sessions, each oldest first.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    logins: VecDeque<Entry>,
    sessions: VecDeque<Entry>,
}

impl Sessions {
    /// A fresh login token, good once until `now + LOGIN_LIFETIME`.
    pub(super) fn mint_login(&mut self, now: Instant) -> String {
        self.prune(now);
        let login = random_secret();
        push_bounded(
            &mut self.logins,
            Entry {
                id: SessionId::of(&login),
                expires: now + LOGIN_LIFETIME,
            },
            MAX_PENDING_LOGINS,
        );
        login
    }

    /// Exchange `login` for a new session's secret (the cookie's value); `None` unless
    /// `login` is pending and unexpired, which it then no longer is.
    pub(super) fn redeem(&mut self, login: &str, now: Instant) -> Option<String> {
        self.prune(now);
        let given = SessionId::of(login);
        let index = self.logins.iter().position(|entry| entry.id == given)?;
        self.logins.remove(index);
        let secret = random_secret();
        push_bounded(
            &mut self.sessions,
            Entry {
                id: SessionId::of(&secret),
                expires: now + SESSION_LIFETIME,
            },
            MAX_SESSIONS,
        );
        Some(secret)
    }

    /// The session whose secret is `secret`, if it is open at `now`.
    pub(super) fn session(&mut self, secret: &str, now: Instant) -> Option<SessionId> {
        let given = SessionId::of(secret);
        self.is_open(given, now).then_some(given)
    }

    /// Whether session `id` is still open at `now`.
    pub(super) fn is_open(&mut self, id: SessionId, now: Instant) -> bool {
        self.prune(now);
        self.sessions.iter().any(|entry| entry.id == id)
    }

    fn prune(&mut self, now: Instant) {
        self.logins.retain(|entry| entry.expires > now);
        self.sessions.retain(|entry| entry.expires > now);
    }
}

/// Append `entry`, dropping the oldest beyond `max`: entries are pushed in time order and
/// share one lifetime, so the front is always the oldest.
fn push_bounded(entries: &mut VecDeque<Entry>, entry: Entry, max: usize) {
    entries.push_back(entry);
    while entries.len() > max {
        entries.pop_front();
    }
}

/// A fresh random secret: 32 bytes from the thread's CSPRNG, as hex.
pub(super) fn random_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_opens_one_session_once_and_only_before_it_expires() {
        let start = Instant::now();
        let mut store = Sessions::default();
        let login = store.mint_login(start);
        assert_eq!(store.redeem("a guess", start), None, "a wrong token");
        assert!(
            store.redeem(&login, start).is_some(),
            "the login works once"
        );
        assert_eq!(store.redeem(&login, start), None, "and only once");

        let late = store.mint_login(start);
        assert_eq!(
            store.redeem(&late, start + LOGIN_LIFETIME),
            None,
            "a login link expires"
        );
    }

    #[test]
    fn a_session_is_refused_once_its_lifetime_is_over() {
        let start = Instant::now();
        let mut store = Sessions::default();
        let login = store.mint_login(start);
        let secret = store.redeem(&login, start).expect("logs in");
        let id = store.session(&secret, start).expect("open at login");
        let last = start + SESSION_LIFETIME - Duration::from_secs(1);
        assert_eq!(store.session(&secret, last), Some(id), "open until its end");
        assert_eq!(
            store.session(&secret, start + SESSION_LIFETIME),
            None,
            "an expired session is refused"
        );
        assert!(!store.is_open(id, start + SESSION_LIFETIME));
        assert_eq!(store.session("forged", start), None);
    }

    #[test]
    fn each_login_has_its_own_session_and_the_oldest_beyond_the_cap_is_dropped() {
        let start = Instant::now();
        let mut store = Sessions::default();
        let secrets: Vec<String> = (0..=MAX_SESSIONS)
            .map(|_| {
                let login = store.mint_login(start);
                store.redeem(&login, start).expect("logs in")
            })
            .collect();
        assert_ne!(secrets[1], secrets[2], "a session per login");
        assert_eq!(
            store.session(&secrets[0], start),
            None,
            "the oldest is dropped"
        );
        assert!(store.session(&secrets[1], start).is_some());
        assert!(store.session(&secrets[MAX_SESSIONS], start).is_some());

        let logins: Vec<String> = (0..=MAX_PENDING_LOGINS)
            .map(|_| store.mint_login(start))
            .collect();
        assert_eq!(
            store.redeem(&logins[0], start),
            None,
            "the oldest login is dropped"
        );
        assert!(store.redeem(&logins[MAX_PENDING_LOGINS], start).is_some());
    }
}
