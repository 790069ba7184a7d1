//! Names and rates of token queues: where a fleet-wide rate limit keeps its tokens
//! (docs/flow-control.md, "Rate limits").
//!
//! A rate limit's scope (a work queue, or one key of a job type, named as a cap's permit
//! queue names it) and its rate name one token queue,
//! `jobhost.tokens.{q|k}.{digest}.{interval}us.{burst}`: the time one token takes to come,
//! in microseconds, and the tokens it saves up at most. Both are in the name, because a
//! queue's arguments are fixed when it is created: a changed rate is a new token queue.

use std::time::Duration;

use super::permits::Scope;

/// How long a token queue nobody takes from lives, on a broker: far longer than a host
/// keeps refilling a scope it sees no job of, so a scope seen again finds its queue.
const EXPIRY: Duration = Duration::from_secs(10 * 60);

/// One rate limit's tokens: one comes every `interval`, at most `burst` wait at once,
/// across every host on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tokens {
    /// The token queue's name.
    pub name: String,
    /// The time one token takes to come.
    pub interval: Duration,
    /// How many tokens wait at most.
    pub burst: u32,
}

impl Tokens {
    /// The tokens of work queue `queue`'s rate limit.
    pub fn for_queue(queue: &str, interval: Duration, burst: u32) -> Self {
        Self::named(&Scope::queue(queue), interval, burst)
    }

    /// The tokens of one key of `job_type`: `key` is the key's text, `None` the bucket of
    /// jobs without one.
    pub fn for_key(job_type: &str, key: Option<&str>, interval: Duration, burst: u32) -> Self {
        Self::named(&Scope::key(job_type, key), interval, burst)
    }

    fn named(scope: &Scope, interval: Duration, burst: u32) -> Self {
        // At least a microsecond, so a token always takes time to come.
        let interval = interval.max(Duration::from_micros(1));
        Self {
            name: format!(
                "jobhost.tokens.{}.{}us.{burst}",
                scope.as_str(),
                interval.as_micros()
            ),
            interval,
            burst,
        }
    }

    /// How long the token queue lives after its last use (`x-expires`).
    pub fn expires(&self) -> Duration {
        EXPIRY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TENTH: Duration = Duration::from_millis(100);

    #[test]
    fn every_scope_rate_and_burst_names_its_own_token_queue() {
        let names = [
            Tokens::for_key("t", Some("a"), TENTH, 5).name,
            Tokens::for_key("t", Some("b"), TENTH, 5).name,
            Tokens::for_key("t", Some("a"), TENTH * 2, 5).name,
            Tokens::for_key("t", Some("a"), TENTH, 6).name,
            Tokens::for_key("t", None, TENTH, 5).name,
            Tokens::for_queue("t", TENTH, 5).name,
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        let hostile = format!("\u{0}\n{}", "x".repeat(1 << 20));
        let name = Tokens::for_key("t", Some(&hostile), TENTH, 5).name;
        assert!(name.len() <= 70, "{name}");
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'),
            "{name}"
        );
        assert!(name.ends_with(".100000us.5"), "{name}");
    }
}
