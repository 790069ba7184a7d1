//! `tracing` output captured as JSON lines in memory, for tests that assert what the host
//! and its guests log. Never a global subscriber: the tests of a binary run side by side
//! in one process, and each captures only what its own threads log.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tracing::Dispatch;
use tracing::subscriber::DefaultGuard;

thread_local! {
    /// The capture a thread of a [`Captured::run`] runtime logs to, while it lives.
    static RUNTIME_CAPTURE: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// Every JSON line a capturing subscriber wrote.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn subscriber(&self, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .json()
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish()
    }

    /// A capture of everything at any level, as this thread's default subscriber: for a
    /// single-threaded runtime, where the guest runs on the thread it watches.
    pub(crate) fn install() -> (Self, DefaultGuard) {
        let captured = Self::default();
        let guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
        (captured, guard)
    }

    /// Run `test` to its end on a multi-threaded runtime of its own (two workers), with a
    /// capture of `info` and above as the default subscriber of every thread of that
    /// runtime (its workers and its blocking pool) and of the calling thread: for tasks
    /// that run on the runtime's threads, such as a worker's. What other tests log at the
    /// same time is not in it.
    pub(crate) fn run<F, Fut>(test: F)
    where
        F: FnOnce(Self) -> Fut,
        Fut: Future<Output = ()>,
    {
        let captured = Self::default();
        let dispatch = Dispatch::new(captured.subscriber(tracing::Level::INFO));
        let on_start = dispatch.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                let guard = tracing::dispatcher::set_default(&on_start);
                RUNTIME_CAPTURE.with(|slot| *slot.borrow_mut() = Some(guard));
            })
            .on_thread_stop(|| {
                RUNTIME_CAPTURE.with(|slot| slot.borrow_mut().take());
            })
            .build()
            .expect("a test runtime");
        let _here = tracing::dispatcher::set_default(&dispatch);
        runtime.block_on(test(captured));
    }

    /// Every line so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes)
            .expect("the JSON formatter writes UTF-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The guest events, as JSON objects.
    pub(crate) fn guest_events(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|line| serde_json::from_str::<Value>(line).expect("each line is a JSON event"))
            .filter(|event| event["target"] == "jobhost::guest")
            .collect()
    }
}
