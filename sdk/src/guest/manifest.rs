//! The plugin's [`Queues`] and [`Job`]s, described as the WIT `manifest`.

use super::bindings::jobhost::plugin::types;
use super::millis;
use crate::limits::{Rate, RateUnit};
use crate::schedule::Timing;
use crate::{Backoff, Job, QueueType, Queues, RetryPolicy};

/// The manifest of plugin `name`: every queue of `Q`, and `jobs` (built by [`job_config`]).
pub fn manifest<Q: Queues>(name: &str, jobs: Vec<types::JobConfig>) -> types::Manifest {
    types::Manifest {
        name: name.to_owned(),
        queues: Q::all().iter().map(queue_config).collect(),
        jobs,
    }
}

/// The manifest entry of job `J`, whose queue must belong to the plugin's queue set `Q`.
pub fn job_config<Q: Queues, J: Job<Queues = Q>>() -> types::JobConfig {
    let limits = J::limits();
    types::JobConfig {
        name: J::NAME.to_owned(),
        queue: J::QUEUE.name().to_owned(),
        retry: J::retry_policy().map(|policy| retry_policy(&policy)),
        timeout: J::timeout().map(millis),
        concurrency: limits.concurrency.map(|cap| types::KeyConcurrency {
            key: cap.key,
            limit: cap.limit,
        }),
        rate: limits.rate.map(|limit| types::KeyRate {
            key: limit.key,
            rate: rate_limit(limit.rate),
            respect_retry_after: limit.respect_retry_after,
        }),
        unique: limits.unique.map(|unique| types::UniqueKey {
            key: unique.key,
            for_: millis(unique.for_),
        }),
        schedule: J::schedule().map(|schedule| types::JobSchedule {
            timing: match schedule.timing {
                Timing::Cron { expression, tz } => {
                    types::ScheduleTiming::Cron(types::CronSchedule { expression, tz })
                }
                Timing::Every(period) => types::ScheduleTiming::Every(millis(period)),
            },
            payload: schedule.payload,
            catch_up: schedule.catch_up,
        }),
    }
}

fn queue_config<Q: Queues>(queue: &Q) -> types::QueueConfig {
    let config = queue.config();
    let limits = queue.limits();
    types::QueueConfig {
        name: config.name,
        prefetch: config.prefetch,
        durable: config.durable,
        queue_type: match config.queue_type {
            QueueType::Classic => types::QueueType::Classic,
            QueueType::Quorum => types::QueueType::Quorum,
        },
        max_priority: config.max_priority,
        message_ttl: config.message_ttl.map(millis),
        // The WIT says "none" for a queue without a policy of its own, which is exactly
        // the default policy; the host maps it back to `RetryPolicy::default()`.
        retry: (config.retry != RetryPolicy::default()).then(|| retry_policy(&config.retry)),
        timeout: config.timeout.map(millis),
        concurrency: limits.concurrency,
        rate: limits.rate.map(rate_limit),
    }
}

fn rate_limit(rate: Rate) -> types::RateLimit {
    types::RateLimit {
        count: rate.count,
        unit: match rate.unit {
            RateUnit::Second => types::RateUnit::Second,
            RateUnit::Minute => types::RateUnit::Minute,
            RateUnit::Hour => types::RateUnit::Hour,
        },
        burst: rate.burst,
    }
}

fn retry_policy(policy: &RetryPolicy) -> types::RetryPolicy {
    let backoff = match policy.backoff {
        Backoff::None => types::Backoff::None,
        Backoff::Fixed(delay) => types::Backoff::Fixed(millis(delay)),
        Backoff::Exponential {
            base,
            factor,
            max,
            jitter,
        } => types::Backoff::Exponential(types::ExponentialBackoff {
            base: millis(base),
            factor,
            max: millis(max),
            jitter,
        }),
    };
    types::RetryPolicy {
        max_attempts: policy.max_attempts,
        backoff,
    }
}
