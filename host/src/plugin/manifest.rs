//! A plugin's manifest: the WIT record turned into host types, validated.
//!
//! Plugins built with the SDK derives are checked at compile time; this is the host's own
//! guard for everything else (a hand-written component, an older SDK), so a manifest the
//! host cannot honour is refused at load instead of misbehaving at the first failure.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jobhost_sdk::limits::{
    JobLimits, KeyCap, KeyRate, QueueLimits, Rate, UniqueKey, check_concurrency, check_key,
};
use jobhost_sdk::{Backoff, QueueConfig, QueueType, RetryPolicy};

use super::bindings::types as wit;
use crate::broker::{MAX_HOLD_DELAY, SHORT_STRING_MAX, UNIQUE_FOR_MAX, queue_name_rule};
use crate::job::schedule::{self as rules, CATCH_UP_MAX, PAYLOAD_MAX};
use crate::job::{
    DeclaredLimits, JobSpec, Manifest, ManifestError, Missed, Schedule, Timing, job_type_rule,
};
use crate::text::{self, NAME_MAX};

/// Turn the guest's manifest into host types, refusing what the host cannot honour.
pub(super) fn from_wit(manifest: wit::Manifest) -> Result<Manifest, ManifestError> {
    check_plugin_name(&manifest.name)?;
    if manifest.jobs.is_empty() {
        return Err(ManifestError::NoJobs {
            plugin: manifest.name,
        });
    }
    let mut queue_names = HashSet::new();
    let mut limits = DeclaredLimits::default();
    let queues = manifest
        .queues
        .into_iter()
        .map(|queue| {
            let declared = queue_limits(&queue)?;
            let queue = queue_config(queue)?;
            if declared != QueueLimits::default() {
                limits.queues.insert(queue.name.clone(), declared);
            }
            if !queue_names.insert(queue.name.clone()) {
                return Err(ManifestError::DuplicateQueue { name: queue.name });
            }
            Ok(queue)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut job_names = HashSet::new();
    let mut schedules = BTreeMap::new();
    let jobs = manifest
        .jobs
        .into_iter()
        .map(|mut job| {
            let declared = job_limits(&job)?;
            let schedule = job.schedule.take();
            let job = job_spec(job)?;
            let schedule = schedule
                .map(|schedule| job_schedule(&job.name, &schedule))
                .transpose()?;
            if declared != JobLimits::default() {
                limits.jobs.insert(job.name.clone(), declared);
            }
            if let Some(schedule) = schedule {
                schedules.insert(job.name.clone(), Arc::new(schedule));
            }
            if !queue_names.contains(&job.queue) {
                return Err(ManifestError::UnknownQueue {
                    job: job.name,
                    queue: shown(&job.queue),
                });
            }
            if !job_names.insert(job.name.clone()) {
                return Err(ManifestError::DuplicateJob { name: job.name });
            }
            Ok(job)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Manifest {
        name: manifest.name,
        queues,
        jobs,
        limits,
        schedules,
    })
}

/// The schedule job type `name` declares, checked by the rules the grants file's schedules
/// are read by, and named after the job type.
fn job_schedule(name: &str, declared: &wit::JobSchedule) -> Result<Schedule, ManifestError> {
    let owner = format!("job `{}`", shown(name));
    let invalid = |why: String| setting(&owner, "schedule", why);
    rules::schedule_name_rule(name).map_err(invalid)?;
    let timing = match &declared.timing {
        wit::ScheduleTiming::Cron(cron) => {
            let tz = if cron.tz.is_empty() {
                chrono_tz::Tz::UTC
            } else {
                rules::time_zone(&cron.tz)
                    .map_err(|why| invalid(format!("tz `{}`: {why}", shown(&cron.tz))))?
            };
            let parsed = rules::cron(&cron.expression)
                .map_err(|why| invalid(format!("cron `{}`: {why}", shown(&cron.expression))))?;
            Timing::Cron {
                cron: Box::new(parsed),
                tz,
            }
        }
        wit::ScheduleTiming::Every(ms) => Timing::Every(
            rules::every_period(Duration::from_millis(*ms))
                .map_err(|why| invalid(format!("every: {why}")))?,
        ),
    };
    // Bounded before it is parsed: the text is the guest's.
    if declared.payload.len() > PAYLOAD_MAX {
        let size = declared.payload.len();
        return Err(invalid(format!(
            "payload of {size} bytes; it may have at most {PAYLOAD_MAX}"
        )));
    }
    let payload = serde_json::from_str(&declared.payload)
        .map_err(|err| invalid(format!("payload is not JSON: {err}")))
        .and_then(|json| rules::payload(json).map_err(invalid))?;
    let missed = match declared.catch_up {
        0 => Missed::Skip,
        n if n <= CATCH_UP_MAX => Missed::CatchUp(n),
        n => return Err(invalid(format!("catch_up {n}: at most {CATCH_UP_MAX}"))),
    };
    Ok(Schedule {
        job_type: name.to_owned(),
        timing,
        payload,
        missed,
        enabled: true,
    })
}

/// A queue's declared limits, checked by the SDK's rules (a plugin not built with the
/// derives may declare anything).
fn queue_limits(queue: &wit::QueueConfig) -> Result<QueueLimits, ManifestError> {
    let owner = format!("queue `{}`", shown(&queue.name));
    let concurrency = queue
        .concurrency
        .map(|limit| check_concurrency(i64::from(limit)))
        .transpose()
        .map_err(|why| setting(&owner, "concurrency", why))?;
    let rate = queue
        .rate
        .map(|rate| rate_limit(rate).map_err(|why| setting(&owner, "rate", why)))
        .transpose()?;
    Ok(QueueLimits { concurrency, rate })
}

/// A job type's declared limits per key, checked by the SDK's rules.
fn job_limits(job: &wit::JobConfig) -> Result<JobLimits, ManifestError> {
    let owner = format!("job `{}`", shown(&job.name));
    let concurrency = match &job.concurrency {
        None => None,
        Some(cap) => {
            check_key(&cap.key).map_err(|why| setting(&owner, "concurrency", why))?;
            let limit = check_concurrency(i64::from(cap.limit))
                .map_err(|why| setting(&owner, "concurrency", why))?;
            Some(KeyCap {
                key: cap.key.clone(),
                limit,
            })
        }
    };
    let rate = match &job.rate {
        None => None,
        Some(limit) => {
            if let Some(key) = &limit.key {
                check_key(key).map_err(|why| setting(&owner, "rate", why))?;
            }
            let rate = rate_limit(limit.rate).map_err(|why| setting(&owner, "rate", why))?;
            Some(KeyRate {
                key: limit.key.clone(),
                rate,
                respect_retry_after: limit.respect_retry_after,
            })
        }
    };
    let unique = match &job.unique {
        None => None,
        Some(unique) => {
            check_key(&unique.key).map_err(|why| setting(&owner, "unique", why))?;
            let for_ = Duration::from_millis(unique.for_);
            if for_.is_zero() || for_ > UNIQUE_FOR_MAX {
                let why = format!("`for` is {for_:?}; it must be 1ms to {UNIQUE_FOR_MAX:?}");
                return Err(setting(&owner, "unique", why));
            }
            Some(UniqueKey {
                key: unique.key.clone(),
                for_,
            })
        }
    };
    Ok(JobLimits {
        concurrency,
        rate,
        unique,
    })
}

/// A declared rate, held to the rules of one written as `COUNT/UNIT` with a burst.
fn rate_limit(rate: wit::RateLimit) -> Result<Rate, String> {
    let unit = match rate.unit {
        wit::RateUnit::Second => 's',
        wit::RateUnit::Minute => 'm',
        wit::RateUnit::Hour => 'h',
    };
    let text = format!("{}/{unit}", rate.count);
    let refused = |why: String| format!("{text} (burst {}): {why}", rate.burst);
    Rate::parse(&text)
        .and_then(|parsed| parsed.with_burst(i64::from(rate.burst)))
        .map_err(refused)
}

fn queue_config(queue: wit::QueueConfig) -> Result<QueueConfig, ManifestError> {
    check_queue_name(&queue.name)?;
    let owner = format!("queue `{}`", queue.name);
    if queue.prefetch == 0 {
        return Err(setting(
            &owner,
            "prefetch",
            "is 0; it must be 1..=65535".to_owned(),
        ));
    }
    let queue_type = match queue.queue_type {
        wit::QueueType::Classic => QueueType::Classic,
        wit::QueueType::Quorum => QueueType::Quorum,
    };
    if queue_type == QueueType::Quorum && !queue.durable {
        return Err(setting(
            &owner,
            "durable",
            "is false, but a quorum queue is always durable".to_owned(),
        ));
    }
    Ok(QueueConfig {
        prefetch: queue.prefetch,
        durable: queue.durable,
        queue_type,
        max_priority: queue.max_priority,
        message_ttl: duration(&owner, "message_ttl", queue.message_ttl)?,
        retry: retry_policy(&owner, queue.retry)?.unwrap_or_default(),
        timeout: duration(&owner, "timeout", queue.timeout)?,
        name: queue.name,
    })
}

/// The plugin's name appears in every log line of its jobs: it must be printable and short.
fn check_plugin_name(name: &str) -> Result<(), ManifestError> {
    if name.trim().is_empty() {
        return Err(ManifestError::EmptyPluginName);
    }
    let invalid = |reason| ManifestError::InvalidPluginName {
        name: shown(name),
        reason,
    };
    if name.len() > NAME_MAX {
        return Err(invalid("it is longer than 200 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("it contains control characters"));
    }
    Ok(())
}

/// Because a job type travels in the AMQP `type` property, it is a short string.
fn job_spec(job: wit::JobConfig) -> Result<JobSpec, ManifestError> {
    let invalid = |reason| ManifestError::InvalidJobName {
        name: shown(&job.name),
        reason,
    };
    job_type_rule(&job.name).map_err(invalid)?;
    let owner = format!("job `{}`", job.name);
    Ok(JobSpec {
        retry: retry_policy(&owner, job.retry)?,
        timeout: duration(&owner, "timeout", job.timeout)?,
        name: job.name,
        queue: job.queue,
    })
}

/// [`queue_name_rule`], as a manifest's error.
fn check_queue_name(name: &str) -> Result<(), ManifestError> {
    queue_name_rule(name).map_err(|reason| ManifestError::InvalidQueueName {
        name: shown(name),
        reason,
    })
}

/// A guest's name as an error message shows it: escaped, and whole up to the longest name
/// AMQP accepts.
fn shown(name: &str) -> String {
    text::bounded(name, SHORT_STRING_MAX).into_owned()
}

fn retry_policy(
    owner: &str,
    policy: Option<wit::RetryPolicy>,
) -> Result<Option<RetryPolicy>, ManifestError> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    if policy.max_attempts == 0 {
        return Err(setting(
            owner,
            "max_attempts",
            "is 0; it must be at least 1".to_owned(),
        ));
    }
    let backoff = match policy.backoff {
        wit::Backoff::None => Backoff::None,
        wit::Backoff::Fixed(delay) => Backoff::Fixed(hold_delay(owner, "delay", delay)?),
        wit::Backoff::Exponential(exp) => {
            if !exp.factor.is_finite() || exp.factor <= 0.0 {
                let reason = format!("is {}; it must be finite and positive", exp.factor);
                return Err(setting(owner, "factor", reason));
            }
            let base = hold_delay(owner, "base", exp.base)?;
            let max = hold_delay(owner, "max", exp.max)?;
            if base > max {
                let reason = format!("is {base:?}, above `max` ({max:?})");
                return Err(setting(owner, "base", reason));
            }
            Backoff::Exponential {
                base,
                factor: exp.factor,
                max,
                jitter: exp.jitter,
            }
        }
    };
    Ok(Some(RetryPolicy::new(policy.max_attempts, backoff)))
}

/// A retry wait: positive, and short enough for a hold queue to hold.
fn hold_delay(owner: &str, key: &'static str, ms: u64) -> Result<Duration, ManifestError> {
    let delay = positive(owner, key, ms)?;
    if delay > MAX_HOLD_DELAY {
        let reason =
            format!("is {delay:?}, longer than a hold queue can hold ({MAX_HOLD_DELAY:?})");
        return Err(setting(owner, key, reason));
    }
    Ok(delay)
}

fn duration(
    owner: &str,
    key: &'static str,
    ms: Option<u64>,
) -> Result<Option<Duration>, ManifestError> {
    ms.map(|ms| positive(owner, key, ms)).transpose()
}

/// Zero is refused everywhere a duration is accepted, as in the derive grammar.
fn positive(owner: &str, key: &'static str, ms: u64) -> Result<Duration, ManifestError> {
    if ms == 0 {
        return Err(setting(
            owner,
            key,
            "is zero; it must be positive".to_owned(),
        ));
    }
    Ok(Duration::from_millis(ms))
}

fn setting(owner: &str, key: &'static str, reason: String) -> ManifestError {
    ManifestError::InvalidSetting {
        owner: owner.to_owned(),
        key,
        reason,
    }
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
