//! The host a native test runs a handler against: it records logs, follow-ups and HTTP
//! requests, and answers config reads and requests as the [`TestContext`] was told.
//!
//! The context reaches it through the [`JobContext`] it is built with. Config reads and
//! requests, which are free functions, reach it through a thread-local that
//! [`Recorder::install`] sets for the length of one run: a handler runs on the thread that
//! calls `run`, as a component has one thread.
//!
//! [`TestContext`]: super::TestContext
//! [`JobContext`]: crate::JobContext

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{EnqueuedBatch, FollowUp, HandlerRun, LogLine, TestContext};
use crate::batch::Batch;
use crate::{JobError, Level};

/// The test's stand-in for the host's `wasi:http`.
#[cfg(feature = "http")]
#[derive(Clone)]
pub(super) struct Responder(pub(super) Arc<ResponderFn>);

#[cfg(feature = "http")]
type ResponderFn = dyn Fn(&crate::http::Request) -> Result<crate::http::Response, crate::http::HttpError>
    + Send
    + Sync;

#[cfg(feature = "http")]
impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

/// The host side of a recorded `JobContext`. Behind mutexes rather than `RefCell`s so
/// that a context is `Send` and `Sync` natively as it is on wasm.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    logs: Mutex<Vec<LogLine>>,
    follow_ups: Mutex<Vec<FollowUp>>,
    batches: Mutex<Vec<EnqueuedBatch>>,
    added: Mutex<Vec<FollowUp>>,
    in_batch: Option<String>,
    refusal: Option<String>,
    config: BTreeMap<String, String>,
    #[cfg(feature = "http")]
    responder: Option<Responder>,
    #[cfg(feature = "http")]
    requests: Mutex<Vec<crate::http::Request>>,
}

thread_local! {
    /// The recorder of the run in progress on this thread, if any.
    static CURRENT: RefCell<Option<Arc<Recorder>>> = const { RefCell::new(None) };
}

/// While alive, this thread's config reads and requests go to one recorder; the previous
/// one (a run inside a run) is restored on drop, also when the handler panics.
pub(super) struct Installed(Option<Arc<Recorder>>);

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

impl Recorder {
    /// A recorder that answers as `test` says, with nothing recorded yet.
    pub(super) fn answering_as(test: &TestContext) -> Self {
        Self {
            refusal: test.refusal.clone(),
            config: test.config.clone(),
            in_batch: test.in_batch.clone(),
            #[cfg(feature = "http")]
            responder: test.responder.clone(),
            ..Self::default()
        }
    }

    /// Make `recorder` this thread's until the guard drops.
    pub(super) fn install(recorder: &Arc<Self>) -> Installed {
        let previous = CURRENT.with(|current| current.replace(Some(Arc::clone(recorder))));
        Installed(previous)
    }

    /// What was recorded, as the run of a handler that returned `result`.
    pub(super) fn finish(&self, result: Result<(), JobError>) -> HandlerRun {
        HandlerRun {
            result,
            logs: std::mem::take(&mut lock(&self.logs)),
            follow_ups: std::mem::take(&mut lock(&self.follow_ups)),
            batches: std::mem::take(&mut lock(&self.batches)),
            added: std::mem::take(&mut lock(&self.added)),
            #[cfg(feature = "http")]
            requests: std::mem::take(&mut lock(&self.requests)),
        }
    }

    pub(crate) fn log(&self, level: Level, message: &str, fields: Vec<(String, String)>) {
        lock(&self.logs).push(LogLine {
            level,
            message: message.to_owned(),
            fields,
        });
    }

    /// Accepts the follow-up unless told to refuse, as the host's `enqueue` import does.
    pub(crate) fn enqueue(
        &self,
        job_type: &'static str,
        payload: &[u8],
        delay: Option<Duration>,
    ) -> Result<String, String> {
        if let Some(reason) = &self.refusal {
            return Err(reason.clone());
        }
        let payload = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        let mut follow_ups = lock(&self.follow_ups);
        let job_id = format!("follow-up-{}", follow_ups.len() + 1);
        follow_ups.push(FollowUp {
            job_id: job_id.clone(),
            job_type,
            payload,
            delay,
        });
        Ok(job_id)
    }
}

impl Recorder {
    /// Accepts the batch unless told to refuse follow-ups, as the host's `enqueue-batch`
    /// import does.
    pub(crate) fn enqueue_batch(&self, batch: Batch) -> Result<String, String> {
        if let Some(reason) = &self.refusal {
            return Err(reason.clone());
        }
        let jobs = members(batch.jobs, "batch-member")?;
        let context = batch
            .context
            .map(|context| serde_json::from_slice(&context).map_err(|e| e.to_string()))
            .transpose()?;
        let mut batches = lock(&self.batches);
        let batch_id = format!("batch-{}", batches.len() + 1);
        batches.push(EnqueuedBatch {
            batch_id: batch_id.clone(),
            jobs,
            on_success: batch.on_success,
            on_complete: batch.on_complete,
            on_death: batch.on_death,
            context,
        });
        Ok(batch_id)
    }

    /// Accepts the jobs when the test put the job in a batch, as the host's
    /// `add-to-batch` import does.
    pub(crate) fn add_to_batch(
        &self,
        jobs: Vec<(&'static str, Vec<u8>)>,
    ) -> Result<Vec<String>, String> {
        if self.in_batch.is_none() {
            return Err("this job is in no batch".to_owned());
        }
        let jobs = members(jobs, "added")?;
        let ids = jobs.iter().map(|job| job.job_id.clone()).collect();
        lock(&self.added).extend(jobs);
        Ok(ids)
    }
}

/// `jobs` as follow-ups numbered `{prefix}-1`, `{prefix}-2`, ...
fn members(jobs: Vec<(&'static str, Vec<u8>)>, prefix: &str) -> Result<Vec<FollowUp>, String> {
    if jobs.is_empty() {
        return Err("a batch has at least one job".to_owned());
    }
    jobs.into_iter()
        .enumerate()
        .map(|(i, (job_type, payload))| {
            Ok(FollowUp {
                job_id: format!("{prefix}-{}", i + 1),
                job_type,
                payload: serde_json::from_slice(&payload).map_err(|e| e.to_string())?,
                delay: None,
            })
        })
        .collect()
}

/// The recorder of the run in progress on this thread.
fn current() -> Option<Arc<Recorder>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// The value the running test gave `key`; none outside a run.
pub(crate) fn config_value(key: &str) -> Option<String> {
    current()?.config.get(key).cloned()
}

/// Records `request` and answers it with the running test's responder; without one, the
/// request fails as one the operator has not granted, which is what a host without
/// grants does.
#[cfg(feature = "http")]
pub(crate) fn respond(
    request: &crate::http::Request,
) -> Result<crate::http::Response, crate::http::HttpError> {
    use crate::http::{HttpError, HttpErrorKind};
    let Some(recorder) = current() else {
        return Err(HttpError::new(
            HttpErrorKind::Denied,
            format!(
                "`{} {}` was sent outside `TestContext::run`, where no request is answered",
                request.method(),
                request.url()
            ),
        ));
    };
    lock(&recorder.requests).push(request.clone());
    match &recorder.responder {
        Some(responder) => (responder.0)(request),
        None => Err(HttpError::new(
            HttpErrorKind::Denied,
            format!(
                "`{} {}` was sent, and this test answers no request: give the TestContext a \
                 responder with `respond_with`",
                request.method(),
                request.url()
            ),
        )),
    }
}

/// The records behind `mutex`; a handler that panicked mid-push left them usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
