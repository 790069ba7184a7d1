//! What an operator tells the whole fleet, on either backend: pause a queue, resume it,
//! cancel a job ([`Control`]), and the fleet following those orders ([`Follower`]).
//!
//! Several `jobhost run` processes on one broker are one fleet; an order reaches every host
//! through the broker they share, never through a server of its own.
//!
//! # Contract
//! - [`Control::order`] returns once the order is with the broker. A pause marks the queue
//!   paused *before* the order is published, a resume unmarks it before: the mark is the
//!   truth ([`Control::is_paused`]), the order only the news, so a host that missed an
//!   order, or joined after the broker forgot it, still learns the state from the mark.
//! - [`Control::follow`] hands every order the broker still keeps, oldest first, then each
//!   new one, to every host that follows; across reconnects it starts again from the
//!   oldest, so a follower sees an order more than once and applies each idempotently.
//!   Each (re)start is announced as [`Followed::Joined`], after which a follower asks
//!   [`Control::is_paused`] again of the queues it cares about.
//! - An order on the wire is hostile until [`Order::decode`] accepted it: at most
//!   [`MAX_ORDER_BYTES`], JSON of the [`Order`] shape, its queue by [`queue_name_rule`]
//!   (super::queue_name_rule), its job id a UUID, its `by` an [`Operator`]. A follower
//!   skips what is not one, with a warning, and follows on.
//!
//! | backend | orders kept | the pause mark |
//! |---|---|---|
//! | RabbitMQ | the stream queue [`CONTROL_STREAM`], for [`CONTROL_RETENTION`] | the quorum queue [`paused_marker_name`] exists |
//! | memory | the last [`MEMORY_ORDERS`] orders, in the process | a set in the process |

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::BrokerError;
use super::hold::queue_name_rule;
use crate::job::Operator;
use crate::text::{NAME_MAX, bounded};

/// The RabbitMQ stream queue every host follows; durable, its orders kept for
/// [`CONTROL_RETENTION`].
pub const CONTROL_STREAM: &str = "jobhost.control";

/// How long the broker keeps an order on [`CONTROL_STREAM`] at least (its `x-max-age`; it
/// drops whole segments once every order in them is older), and so how long a cancellation
/// reaches a host that starts later. Pauses last until resumed, whatever this says.
pub const CONTROL_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most orders the memory backend keeps for followers that join later.
pub const MEMORY_ORDERS: usize = 10_000;

/// The largest order a follower reads; a longer message is skipped unread.
pub const MAX_ORDER_BYTES: usize = 4096;

/// The (quorum) queue whose existence marks `queue` paused on RabbitMQ. A work queue's name
/// leaves room for it ([`queue_name_rule`](super::queue_name_rule)).
pub fn paused_marker_name(queue: &str) -> String {
    format!("jobhost.paused.{queue}")
}

/// What an operator asks of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Command {
    /// Stop consuming `queue` until resumed; its messages keep their place.
    Pause {
        /// The work queue.
        queue: String,
    },
    /// Consume `queue` again.
    Resume {
        /// The work queue.
        queue: String,
    },
    /// Settle the job as cancelled when it is delivered, or interrupt it where it runs.
    Cancel {
        /// The job.
        job_id: Uuid,
    },
}

/// One order: what, who asked, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// What to do.
    #[serde(flatten)]
    pub command: Command,
    /// Who asked.
    pub by: Operator,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// Why a message on the control stream is not an order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an operator order: {0}")]
pub struct BadOrder(String);

impl Order {
    /// `command`, given by `by` now.
    pub fn now(command: Command, by: Operator) -> Self {
        let at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Self { command, by, at_ms }
    }

    /// The order's JSON body.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an order always serializes")
    }

    /// The order in `body`, checked as [the module doc](self) says.
    pub fn decode(body: &[u8]) -> Result<Self, BadOrder> {
        if body.len() > MAX_ORDER_BYTES {
            return Err(BadOrder(format!(
                "{} bytes, the limit is {MAX_ORDER_BYTES}",
                body.len()
            )));
        }
        let order: Self = serde_json::from_slice(body)
            .map_err(|err| BadOrder(bounded(&err.to_string(), NAME_MAX).into_owned()))?;
        order.check()?;
        Ok(order)
    }

    /// Whether the queue it names may be one, so that what an API caller sends is refused
    /// before it is published.
    pub fn check(&self) -> Result<(), BadOrder> {
        match &self.command {
            Command::Pause { queue } | Command::Resume { queue } => {
                queue_name_rule(queue).map_err(|reason| {
                    BadOrder(format!(
                        "queue `{}` is invalid: {reason}",
                        bounded(queue, NAME_MAX)
                    ))
                })
            }
            Command::Cancel { .. } => Ok(()),
        }
    }
}

/// What a [`Follower`] hands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// The follower (re)joined the fleet's orders: what follows starts from the oldest kept,
    /// and what it missed meanwhile is only in the pause marks.
    Joined,
    /// An order, checked.
    Order(Order),
}

/// Operator orders to the fleet, on the broker the fleet shares; see the
/// [module doc](self) for the contract.
pub trait Control: Send + Sync + 'static {
    /// A follower of the fleet's orders.
    type Follower: Follower;

    /// Mark or unmark a paused queue as the order says, then publish `order` to every host.
    fn order(&self, order: &Order) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Whether `queue` is marked paused now.
    fn is_paused(&self, queue: &str) -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// Follow the fleet's orders from the oldest the broker keeps.
    fn follow(&self) -> impl Future<Output = Result<Self::Follower, BrokerError>> + Send;
}

/// The fleet's orders as one host receives them.
pub trait Follower: Send + 'static {
    /// The next order (or a rejoin), waiting for one; `None` once the backend is closed.
    /// Not cancel-safe: an order taken off the broker when the future is dropped is lost
    /// to this follower (until it rejoins).
    fn next(&mut self) -> impl Future<Output = Option<Followed>> + Send;
}

/// A shared backend controls the fleet as the backend does.
impl<C: Control> Control for std::sync::Arc<C> {
    type Follower = C::Follower;

    fn order(&self, order: &Order) -> impl Future<Output = Result<(), BrokerError>> + Send {
        (**self).order(order)
    }

    fn is_paused(&self, queue: &str) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        (**self).is_paused(queue)
    }

    fn follow(&self) -> impl Future<Output = Result<Self::Follower, BrokerError>> + Send {
        (**self).follow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(command: Command) -> Order {
        Order {
            command,
            by: Operator::new("alice@host").expect("an operator"),
            at_ms: 1,
        }
    }

    #[test]
    fn an_order_goes_over_the_wire_and_back_as_it_was() {
        for command in [
            Command::Pause { queue: "q".into() },
            Command::Resume { queue: "q".into() },
            Command::Cancel {
                job_id: Uuid::new_v4(),
            },
        ] {
            let sent = order(command);
            assert_eq!(Order::decode(&sent.encode()), Ok(sent));
        }
        let wire = br#"{"op":"pause","queue":"app.emails","by":"bob@ci","at_ms":5}"#;
        assert_eq!(
            Order::decode(wire).expect("the documented shape").command,
            Command::Pause {
                queue: "app.emails".into()
            }
        );
    }

    #[test]
    fn what_is_not_an_order_is_refused_with_the_reason() {
        let long = format!(
            r#"{{"op":"pause","queue":"q","by":"{}","at_ms":1}}"#,
            "a".repeat(MAX_ORDER_BYTES)
        );
        for (body, why) in [
            (&b"\xff\x00garbage"[..], "expected value"),
            (br#"{"op":"explode","by":"a","at_ms":1}"#, "unknown variant"),
            (
                br#"{"op":"cancel","job_id":"not-a-uuid","by":"a","at_ms":1}"#,
                "UUID",
            ),
            (
                br#"{"op":"pause","queue":"amq.x","by":"a","at_ms":1}"#,
                "reserved",
            ),
            (
                br#"{"op":"pause","queue":"q","by":"a\u0000","at_ms":1}"#,
                "operator",
            ),
            (
                br#"{"op":"pause","queue":"q","at_ms":1}"#,
                "missing field `by`",
            ),
            (long.as_bytes(), "the limit is"),
        ] {
            let err = Order::decode(body).expect_err(&String::from_utf8_lossy(body));
            assert!(err.to_string().contains(why), "{err}");
        }
    }

    #[test]
    fn a_pause_mark_fits_beside_the_longest_work_queue_name() {
        let longest = "q".repeat(235);
        assert!(queue_name_rule(&longest).is_ok());
        assert!(paused_marker_name(&longest).len() <= super::super::SHORT_STRING_MAX);
    }
}
