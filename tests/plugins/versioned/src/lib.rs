//! Test plugin for hot reload: the same job type, `versioned.Echo` on queue
//! `test.versioned`, in two versions, so a test can swap one for the other and see which
//! one ran a delivery and which policy applied.
//!
//! | | built | job policy | outcome |
//! |---|---|---|---|
//! | v1 | default | 2 attempts, fixed 1s | logs `v1`, succeeds |
//! | v2 | `--features v2` | 4 attempts, fixed 2s | logs `v2`, fails retryably with `v2 says no` until attempt 3, then succeeds |
//!
//! Both versions also fail retryably with `{version} says no` while the attempt is at most
//! the payload's `fail_times` (default 0), so a job can be caught mid-retries by a swap.

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum VersionedQueues {
    Versioned,
}

/// Echoes `message` into the log, tagged with the plugin's version.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "versioned.Echo", queue = VersionedQueues::Versioned)]
#[cfg_attr(
    not(feature = "v2"),
    job(retry(max_attempts = 2, backoff = "fixed", delay = "1s"))
)]
#[cfg_attr(
    feature = "v2",
    job(retry(max_attempts = 4, backoff = "fixed", delay = "2s"))
)]
struct Echo {
    #[serde(default)]
    message: String,
    #[serde(default)]
    fail_times: u32,
}

/// This build's version, which every call logs as its message.
const VERSION: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

/// The first attempt on which v2 says yes.
const V2_SUCCEEDS_ON: u32 = 3;

fn echo(job: Echo, ctx: &JobContext) -> Result<(), JobError> {
    ctx.log(Level::Info, VERSION, &[("message", &job.message)]);
    let v2_says_no = cfg!(feature = "v2") && ctx.attempt() < V2_SUCCEEDS_ON;
    if v2_says_no || ctx.attempt() <= job.fail_times {
        return Err(JobError::retryable(format!("{VERSION} says no")));
    }
    Ok(())
}

jobhost_sdk::plugin!(queues = VersionedQueues, jobs = { Echo => echo });
