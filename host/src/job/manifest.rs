//! A plugin's manifest in host types: the queues it consumes, the job types it handles, the
//! fleet-wide limits it declares on them and the periodic jobs it declares.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jobhost_sdk::limits::{JobLimits, QueueLimits};
use jobhost_sdk::{QueueConfig, RetryPolicy};

use super::Schedule;

/// What a plugin serves: its queues and the job types it handles.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The plugin's name, for logs and admin output.
    pub name: String,
    /// The queues the plugin consumes, names unique.
    pub queues: Vec<QueueConfig>,
    /// The job types the plugin handles, names unique, each on one of `queues`.
    pub jobs: Vec<JobSpec>,
    /// The fleet-wide limits it declares on them.
    pub limits: DeclaredLimits,
    /// The periodic schedules it declares (`#[job(cron = ..)]`), by job type, the name of
    /// each; the operator's grants file may override one by a schedule of that name.
    pub schedules: BTreeMap<String, Arc<Schedule>>,
}

/// The concurrency caps and rate limits a plugin declares on its queues
/// (`#[queue(concurrency = .., rate = ..)]`) and job types (`#[job(concurrency(..),
/// rate(..))]`), checked by the SDK's rules; the operator's grants file overrides each
/// (docs/flow-control.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclaredLimits {
    /// By queue name; only queues that declare a limit.
    pub queues: BTreeMap<String, QueueLimits>,
    /// By job type; only job types that declare a limit.
    pub jobs: BTreeMap<String, JobLimits>,
}

impl Manifest {
    /// The job type called `name`, if this plugin handles it.
    pub fn job(&self, name: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|job| job.name == name)
    }

    /// The queue called `name`, if this plugin declares it.
    pub fn queue(&self, name: &str) -> Option<&QueueConfig> {
        self.queues.iter().find(|queue| queue.name == name)
    }
}

/// The longest job type: it travels in the AMQP `type` property, a short string.
pub const JOB_TYPE_MAX: usize = 255;

/// What a job type name must be, wherever it is written (a plugin's manifest, a schedule
/// of the grants file): non-empty, at most [`JOB_TYPE_MAX`] bytes, without control
/// characters; the error says which part it breaks.
pub fn job_type_rule(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.len() > JOB_TYPE_MAX {
        return Err("it is longer than 255 bytes");
    }
    if name.chars().any(char::is_control) {
        return Err("it contains control characters");
    }
    Ok(())
}

/// One job type of a plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The job type carried in envelopes.
    pub name: String,
    /// The queue its jobs are published to; one of the manifest's queues.
    pub queue: String,
    /// The job's own policy; replaces the queue's entirely when present.
    pub retry: Option<RetryPolicy>,
    /// How long one attempt may run; overrides the queue's timeout.
    pub timeout: Option<Duration>,
}

/// The first thing wrong with a manifest.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The plugin has no name to appear in logs under.
    #[error("the plugin name is empty")]
    EmptyPluginName,
    /// A plugin name that cannot appear in a log line as it is.
    #[error("plugin name `{name}` is invalid: {reason}")]
    InvalidPluginName {
        /// The name, bounded and escaped.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A plugin without jobs would consume queues it cannot handle.
    #[error("plugin `{plugin}` declares no jobs")]
    NoJobs {
        /// The plugin's name.
        plugin: String,
    },
    /// A queue name the broker would refuse or confuse with another queue.
    #[error("queue name `{name}` is invalid: {reason}")]
    InvalidQueueName {
        /// The queue name, bounded and escaped.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// Two queues with one name.
    #[error("queue `{name}` is declared twice")]
    DuplicateQueue {
        /// The queue name.
        name: String,
    },
    /// A job type name that cannot be routed.
    #[error("job name `{name}` is invalid: {reason}")]
    InvalidJobName {
        /// The job type name, bounded and escaped.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Two jobs with one name.
    #[error("job `{name}` is declared twice")]
    DuplicateJob {
        /// The job type name.
        name: String,
    },
    /// A job on a queue the manifest does not declare.
    #[error("job `{job}` uses queue `{queue}`, which the manifest does not declare")]
    UnknownQueue {
        /// The job type name.
        job: String,
        /// The undeclared queue, bounded and escaped.
        queue: String,
    },
    /// A queue or job setting out of the range the host can honour.
    #[error("{owner}: `{key}` {reason}")]
    InvalidSetting {
        /// `queue `name`` or `job `name``.
        owner: String,
        /// The setting, as spelled in the derive grammar.
        key: &'static str,
        /// The value and the accepted range.
        reason: String,
    },
}
