//! The job vocabulary shared by the worker, the policy, the admin API and the plugin layer,
//! free of wasmtime and of the broker.
//!
//! - [`Manifest`], [`JobSpec`], [`ManifestError`]: what a plugin serves, and why a manifest
//!   is refused.
//! - [`Invocation`], [`Outcome`], [`FollowUp`]: one delivery to run, and what became of it.
//! - [`Callback`], [`Callbacks`], [`MemberEnd`], [`Joins`]: a batch's callbacks, how a
//!   member ends for it, and which batch a follow-up joins ([`batch`]).
//! - [`Settled`], [`DeadCause`], [`Throttle`], [`SettledJob`]: how a delivery was settled,
//!   as the host's observers read it ([`crate::telemetry`]).
//! - [`PluginChange`]: what a load of one plugin file did.
//! - [`Deadline`], [`Expired`], [`Start`]: when a job expires, and a start that would come
//!   after it.
//! - [`Operator`], [`Cancellation`]: who gave an operator command and when, as a cancelled
//!   job shows it.
//! - [`Utc`]: a moment as the log, dead letters and the CLI show it.
//! - [`MAX_HOLD_DELAY`], [`DelayTooLong`]: how long a job can wait in a hold queue.
//! - [`Recording`], [`Recorder`]: one attempt's inputs and import answers, kept to replay
//!   it offline ([`recording`]).
//! - [`Schedule`], [`Timing`], [`Missed`]: when a periodic job fires, the operator's or a
//!   plugin's, and the rules both are read by ([`schedule`]).

pub mod batch;
mod delay;
mod expiry;
mod invocation;
mod manifest;
mod operator;
mod plugin_change;
pub mod recording;
pub mod schedule;
mod settled;
mod utc;

pub use batch::{Callback, Callbacks, Joins, MemberEnd};
pub use delay::{DelayTooLong, MAX_HOLD_DELAY};
pub use expiry::{Deadline, Expired, Start};
pub(crate) use expiry::{now_ms, now_plus};
pub use invocation::{FollowUp, Invocation, Outcome, Record};
pub use manifest::{DeclaredLimits, JOB_TYPE_MAX, JobSpec, Manifest, ManifestError, job_type_rule};
pub use operator::{Cancellation, OPERATOR_MAX, Operator};
pub use plugin_change::PluginChange;
pub use recording::{Recorder, Recording};
pub use schedule::{Missed, Schedule, Timing};
pub use settled::{DeadCause, Delayed, JobRef, OTHER_JOB_TYPE, Settled, SettledJob, Throttle};
pub use utc::Utc;
