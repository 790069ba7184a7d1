//! Batches: jobs enqueued together, with callbacks that fire once across the fleet when
//! they end (see docs/batches.md).
//!
//! A batch lives in the fleet's batch log ([`crate::broker::Batches`]): its opening (the
//! members' job ids, the callbacks), each member's ending, appended by the host that
//! settles it for good before its ack (`worker::settle`), and each callback's firing.
//! Every host follows the log and folds it the same way, so any host answers for any
//! batch, and any host can fire a callback that falls due.
//!
//! - [`open`]: opening a batch from the admin API.
//! - [`tally`]: the fold: counts per batch, which callbacks are due.
//! - [`keeper`]: the host's task: follow, fold, fire each callback once.

pub mod keeper;
pub mod open;
pub mod tally;

pub use keeper::{Board, FIRING_LOCK_FOR, Keeper, RECHECK, firing_lock};
pub use open::{BatchJob, BatchOpened, BatchRequest, OpenError, open};
pub use tally::{BatchView, CallbackView, Due, Tally, callback_job_id};
