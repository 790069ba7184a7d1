//! A record of every invocation, for assertions about attempts and waits.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;
use uuid::Uuid;

use crate::job::{Invocation, Outcome};
use crate::worker::{BoxFuture, Handler};

/// One handler run as the harness saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The job's id.
    pub job_id: Uuid,
    /// The job type.
    pub job_type: String,
    /// The attempt number of this delivery.
    pub attempt: u32,
    /// The max attempts the handler was told.
    pub max_attempts: u32,
    /// How often the job was deferred before this delivery.
    pub deferrals: u32,
    /// The delivery's priority.
    pub priority: u8,
    /// The payload's JSON text.
    pub payload: String,
    /// When the handler started, on tokio's (possibly paused) clock.
    pub started: Instant,
    /// How it ended: `ok`, or the failure in the words of a dead-letter reason.
    pub outcome: String,
}

/// Every handler run, in start order. Clones share the record.
#[derive(Debug, Clone, Default)]
pub struct InvocationLog {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl InvocationLog {
    fn lock(&self) -> MutexGuard<'_, Vec<Call>> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().clone()
    }

    /// The calls whose payload mentions `key` (e.g. an email address), in start order.
    pub fn calls_of(&self, key: &str) -> Vec<Call> {
        let quoted = serde_json::to_string(key).expect("a string serializes");
        self.lock()
            .iter()
            .filter(|c| c.payload.contains(&quoted))
            .cloned()
            .collect()
    }

    /// The attempt numbers of the calls whose payload mentions `key`.
    pub fn attempts_of(&self, key: &str) -> Vec<u32> {
        self.calls_of(key).iter().map(|c| c.attempt).collect()
    }

    /// The waits between consecutive calls whose payload mentions `key`.
    pub fn waits_of(&self, key: &str) -> Vec<std::time::Duration> {
        let calls = self.calls_of(key);
        calls
            .windows(2)
            .map(|pair| pair[1].started - pair[0].started)
            .collect()
    }

    /// `inner`, recording each of its runs in this log.
    pub fn recording(&self, inner: Arc<dyn Handler>) -> Arc<dyn Handler> {
        Arc::new(Recording {
            inner,
            log: self.clone(),
        })
    }
}

struct Recording {
    inner: Arc<dyn Handler>,
    log: InvocationLog,
}

impl Handler for Recording {
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let started = Instant::now();
            let outcome = self.inner.invoke(job).await;
            let summary = match &outcome {
                Outcome::Completed { .. } => "ok".to_owned(),
                Outcome::Failed(err) => err.to_string(),
                Outcome::Undecodable(err) => format!("decode error: {err}"),
                Outcome::Crashed(msg) => format!("crashed: {msg}"),
            };
            self.log.lock().push(Call {
                job_id: job.job_id,
                job_type: job.job_type.to_owned(),
                attempt: job.attempt,
                max_attempts: job.max_attempts,
                deferrals: job.deferrals,
                priority: job.priority,
                payload: String::from_utf8_lossy(job.payload).into_owned(),
                started,
                outcome: summary,
            });
            outcome
        })
    }
}
