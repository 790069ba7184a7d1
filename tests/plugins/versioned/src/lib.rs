//! Test plugin for hot reload: the same job type, `versioned.Echo` on queue
//! `test.versioned`, in two versions, so a test can swap one for the other and see which
//! one ran a delivery and which policy applied.
//!
//! | | built | job policy | outcome |
//! |---|---|---|---|
//! | v1 | default | 2 attempts, fixed 1s | logs `v1`, succeeds |
//! | v2 | `--features v2` | 4 attempts, fixed 2s | logs `v2`, fails retryably with `v2 says no` until attempt 3, then succeeds |

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum VersionedQueues {
    Versioned,
}

/// Echoes `message` into the log, tagged with the plugin's version.
#[derive(Debug, Serialize, Deserialize, Job)]
#[cfg_attr(
    not(feature = "v2"),
    job(
        name = "versioned.Echo",
        queue = VersionedQueues::Versioned,
        retry(max_attempts = 2, backoff = "fixed", delay = "1s")
    )
)]
#[cfg_attr(
    feature = "v2",
    job(
        name = "versioned.Echo",
        queue = VersionedQueues::Versioned,
        retry(max_attempts = 4, backoff = "fixed", delay = "2s")
    )
)]
struct Echo {
    #[serde(default)]
    message: String,
}

#[cfg(not(feature = "v2"))]
fn echo(job: Echo, ctx: &JobContext) -> Result<(), JobError> {
    ctx.log(jobhost_sdk::Level::Info, "v1", &[("message", &job.message)]);
    Ok(())
}

#[cfg(feature = "v2")]
fn echo(job: Echo, ctx: &JobContext) -> Result<(), JobError> {
    ctx.log(jobhost_sdk::Level::Info, "v2", &[("message", &job.message)]);
    if ctx.attempt() < 3 {
        return Err(JobError::retryable("v2 says no"));
    }
    Ok(())
}

jobhost_sdk::plugin!(queues = VersionedQueues, jobs = { Echo => echo });
