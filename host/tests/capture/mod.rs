//! `tracing` output captured as JSON lines in memory, for tests that assert what the host
//! and its guests log. Each test binary uses a subset.
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::Value;
use tracing::subscriber::DefaultGuard;

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

    /// The binary's capture of `info` and above, installed as the global subscriber on
    /// first use: for tasks on a multi-threaded runtime.
    pub(crate) fn global() -> &'static Self {
        static CAPTURED: OnceLock<Captured> = OnceLock::new();
        CAPTURED.get_or_init(|| {
            let captured = Self::default();
            tracing::subscriber::set_global_default(captured.subscriber(tracing::Level::INFO))
                .expect("the only global subscriber of this binary");
            captured
        })
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
