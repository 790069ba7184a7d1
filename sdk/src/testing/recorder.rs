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

use super::{FollowUp, HandlerRun, LogLine, TestContext};
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
