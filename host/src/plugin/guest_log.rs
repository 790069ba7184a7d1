//! Where a guest's words go: `log` calls and stdout/stderr lines become `tracing` events.
//!
//! Every event has target `jobhost::guest` and carries the fields `plugin`, `job_type`,
//! `job_id` and `attempt`, plus `source` (`log`, `stdout` or `stderr`) and, for `log`
//! calls, the guest's own key-value pairs rendered into `fields`. Because a guest can
//! print in a loop, each job has a byte budget ([`LOG_BUDGET`]); what exceeds it is
//! dropped and counted, and one warning reports the count when the job's store is dropped.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tracing::Level;
use uuid::Uuid;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::bindings::types::Level as GuestLevel;

/// Bytes of log messages, fields and output lines one job may emit.
pub(super) const LOG_BUDGET: usize = 64 * 1024;

/// How much a guest may write per `check-write` permit; large enough that `println!` of a
/// long line is one write.
const WRITE_PERMIT: usize = 64 * 1024;

/// The fields every event of one job carries.
#[derive(Debug, Clone)]
pub(super) struct LogTags {
    pub(super) plugin: Arc<str>,
    pub(super) job_type: String,
    pub(super) job_id: Uuid,
    pub(super) attempt: u32,
}

/// One job's log output: shared by the store's data and its stdout/stderr streams.
#[derive(Debug)]
pub(super) struct LogSink {
    tags: LogTags,
    state: Mutex<SinkState>,
}

#[derive(Debug)]
struct SinkState {
    remaining: usize,
    dropped: usize,
    /// The unterminated last line of stdout and of stderr.
    partial: [Vec<u8>; 2],
}

/// Which standard stream a guest wrote to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stdio {
    Stdout = 0,
    Stderr = 1,
}

impl Stdio {
    fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

macro_rules! guest_event {
    ($level:expr, $tags:expr, $source:expr, $fields:expr, $message:expr) => {
        tracing::event!(
            target: "jobhost::guest",
            $level,
            plugin = %$tags.plugin,
            job_type = %$tags.job_type,
            job_id = %$tags.job_id,
            attempt = $tags.attempt,
            source = $source,
            fields = %$fields,
            "{}",
            $message
        )
    };
}

fn emit(level: Level, tags: &LogTags, source: &str, fields: &str, message: &str) {
    match level {
        Level::TRACE => guest_event!(Level::TRACE, tags, source, fields, message),
        Level::DEBUG => guest_event!(Level::DEBUG, tags, source, fields, message),
        Level::INFO => guest_event!(Level::INFO, tags, source, fields, message),
        Level::WARN => guest_event!(Level::WARN, tags, source, fields, message),
        Level::ERROR => guest_event!(Level::ERROR, tags, source, fields, message),
    }
}

impl LogSink {
    pub(super) fn new(tags: LogTags) -> Arc<Self> {
        let state = SinkState {
            remaining: LOG_BUDGET,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
        };
        Arc::new(Self {
            tags,
            state: Mutex::new(state),
        })
    }

    /// A `log` call of the guest.
    pub(super) fn log(&self, level: GuestLevel, message: &str, fields: &[(String, String)]) {
        let cost = message.len()
            + fields
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum::<usize>();
        if !self.state().charge(cost) {
            return;
        }
        let rendered = fields
            .iter()
            .map(|(key, value)| format!("{key}={value:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let level = match level {
            GuestLevel::Trace => Level::TRACE,
            GuestLevel::Debug => Level::DEBUG,
            GuestLevel::Info => Level::INFO,
            GuestLevel::Warn => Level::WARN,
            GuestLevel::Error => Level::ERROR,
        };
        emit(level, &self.tags, "log", &rendered, message);
    }

    /// Bytes the guest wrote to stdout or stderr: complete lines are emitted at once.
    fn write(&self, stdio: Stdio, bytes: &[u8]) {
        let mut state = self.state();
        let accepted = bytes.len().min(state.remaining);
        state.dropped += bytes.len() - accepted;
        state.remaining -= accepted;
        let partial = &mut state.partial[stdio as usize];
        partial.extend_from_slice(&bytes[..accepted]);
        if let Some(end) = partial.iter().rposition(|&b| b == b'\n') {
            let rest = partial.split_off(end + 1);
            let lines = std::mem::replace(partial, rest);
            drop(state);
            for line in lines.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
                self.emit_line(stdio, line);
            }
        }
    }

    fn emit_line(&self, stdio: Stdio, line: &[u8]) {
        let line = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line));
        let level = match stdio {
            Stdio::Stdout => Level::INFO,
            Stdio::Stderr => Level::WARN,
        };
        emit(level, &self.tags, stdio.name(), "", &line);
    }

    fn state(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SinkState {
    fn charge(&mut self, cost: usize) -> bool {
        if cost > self.remaining {
            self.dropped += cost;
            return false;
        }
        self.remaining -= cost;
        true
    }
}

impl Drop for LogSink {
    /// The job is over: emit unterminated lines and report what the budget dropped.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let partial = std::mem::take(&mut state.partial);
        let dropped = state.dropped;
        for (stdio, line) in [Stdio::Stdout, Stdio::Stderr].into_iter().zip(partial) {
            if !line.is_empty() {
                self.emit_line(stdio, &line);
            }
        }
        if dropped > 0 {
            let message = format!(
                "guest log output truncated: {dropped} bytes dropped beyond the budget of {LOG_BUDGET} bytes per job"
            );
            emit(Level::WARN, &self.tags, "host", "", &message);
        }
    }
}

/// A guest's stdout or stderr, writing into the job's [`LogSink`].
#[derive(Debug, Clone)]
pub(super) struct GuestStdio {
    sink: Arc<LogSink>,
    stdio: Stdio,
}

impl GuestStdio {
    pub(super) fn new(sink: Arc<LogSink>, stdio: Stdio) -> Self {
        Self { sink, stdio }
    }
}

impl IsTerminal for GuestStdio {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStdio {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    /// Because writes land in memory, they complete at once: no background task, and the
    /// lines are emitted in order with the guest's `log` calls.
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestStdio {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.sink.write(self.stdio, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStdio {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestStdio {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.sink.write(self.stdio, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
