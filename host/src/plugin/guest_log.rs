//! Where a guest's words go: `log` calls and stdout/stderr lines become `tracing` events.
//!
//! Every event has target `jobhost::guest` and carries the fields `plugin`, `job_type`,
//! `job_id`, `attempt`, `trace_id` and `span_id` (the attempt's, see [`crate::trace`]; none
//! for the manifest call at load), plus `source` (`log`, `stdout` or `stderr`) and, for `log`
//! calls, the guest's own key-value pairs rendered into `fields`.
//!
//! Because a guest can print in a loop, a job's output is bounded twice:
//! - the first [`LOG_BUDGET`] bytes reach the log; what exceeds it is dropped and counted,
//!   and one warning reports the count when the job's store is dropped;
//! - every byte the guest hands over counts against [`HostCallBudget::log_bytes`], checked
//!   before it is copied; beyond it the guest traps with [`BudgetExceeded::LogBytes`].
//!
//! Every guest string is bounded and escaped ([`text::bounded`]) before it reaches an
//! event: a message or line keeps [`REASON_MAX`] bytes, a field key [`NAME_MAX`], a field
//! value [`REASON_MAX`], so no guest can forge a log line or write an unbounded one.
//!
//! [`HostCallBudget::log_bytes`]: super::HostCallBudget::log_bytes

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tracing::Level;
use uuid::Uuid;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use super::bindings::types::Level as GuestLevel;
use super::budget::BudgetExceeded;
use super::tape::Tape;
use crate::job::recording::LogLine;
use crate::text::{self, NAME_MAX, REASON_MAX};
use crate::trace::JobTrace;

/// Bytes of log messages, fields and output lines of one job that reach the log.
pub(super) const LOG_BUDGET: usize = 64 * 1024;

/// How much a guest may write per `check-write` permit; large enough that `println!` of a
/// long line is one write. Because wasmtime-wasi copies a write out of guest memory before
/// the stream sees it, this is also the most one write copies before it is charged.
const WRITE_PERMIT: usize = 64 * 1024;

/// The fields every event of one job carries, bounded and escaped.
#[derive(Debug, Clone)]
pub(super) struct LogTags {
    plugin: Arc<str>,
    job_type: String,
    job_id: Uuid,
    attempt: u32,
    trace: Option<JobTrace>,
}

impl LogTags {
    /// Tags for one call into `plugin`; its name and the job type come from a guest and a
    /// producer, so both are bounded to [`NAME_MAX`] and escaped.
    pub(super) fn new(
        plugin: &Arc<str>,
        job_type: &str,
        job_id: Uuid,
        attempt: u32,
        trace: Option<JobTrace>,
    ) -> Self {
        let plugin = match text::bounded(plugin, NAME_MAX) {
            Cow::Borrowed(_) => Arc::clone(plugin),
            Cow::Owned(bounded) => bounded.into(),
        };
        Self {
            plugin,
            job_type: text::bounded(job_type, NAME_MAX).into_owned(),
            job_id,
            attempt,
            trace,
        }
    }
}

/// One job's log output: shared by the store's data and its stdout/stderr streams.
#[derive(Debug)]
pub(super) struct LogSink {
    tags: LogTags,
    state: Mutex<SinkState>,
    /// Where a recorded or replayed job's lines are written down too; a replay's lines go
    /// only there, for the replay to show.
    tape: Option<Tape>,
}

#[derive(Debug)]
struct SinkState {
    /// Bytes the guest may still hand over before it traps.
    budget: usize,
    /// [`HostCallBudget::log_bytes`](super::HostCallBudget::log_bytes), for the message.
    limit: usize,
    exceeded: Option<BudgetExceeded>,
    /// Bytes that may still reach the log.
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
            trace_id = $tags.trace.map(|t| tracing::field::display(t.trace_id)),
            span_id = $tags.trace.map(|t| tracing::field::display(t.span_id)),
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
    /// A sink for one job that may hand over `log_bytes` bytes in all.
    pub(super) fn new(tags: LogTags, log_bytes: usize, tape: Option<Tape>) -> Arc<Self> {
        let state = SinkState {
            budget: log_bytes,
            limit: log_bytes,
            exceeded: None,
            remaining: LOG_BUDGET,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
        };
        Arc::new(Self {
            tags,
            state: Mutex::new(state),
            tape,
        })
    }

    /// The overrun that trapped the guest, if any.
    pub(super) fn exceeded(&self) -> Option<BudgetExceeded> {
        self.state().exceeded.clone()
    }

    /// A `log` call of the guest, its strings still in guest memory: charged against the
    /// budget first, then emitted if the log has room.
    pub(super) fn log<S: AsRef<str>>(
        &self,
        level: GuestLevel,
        message: &str,
        fields: &[(S, S)],
    ) -> Result<(), BudgetExceeded> {
        let handed = message.len()
            + fields
                .iter()
                .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
                .sum::<usize>();
        let mut state = self.state();
        state.spend(handed)?;
        // Two bytes a field for the `=` and the separator of its rendering.
        if !state.charge(handed + 2 * fields.len()) {
            return Ok(());
        }
        drop(state);
        // `{:?}` quotes a value, so a value cannot pose as another field.
        let rendered = fields
            .iter()
            .map(|(key, value)| {
                let key = text::bounded(key.as_ref(), NAME_MAX);
                format!("{key}={:?}", text::bounded(value.as_ref(), REASON_MAX))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let level = match level {
            GuestLevel::Trace => Level::TRACE,
            GuestLevel::Debug => Level::DEBUG,
            GuestLevel::Info => Level::INFO,
            GuestLevel::Warn => Level::WARN,
            GuestLevel::Error => Level::ERROR,
        };
        let message = text::bounded(message, REASON_MAX);
        self.emit(level, "log", &rendered, &message);
        Ok(())
    }

    /// Bytes the guest wrote to stdout or stderr: charged, then complete lines are
    /// emitted at once.
    fn write(&self, stdio: Stdio, bytes: &[u8]) -> Result<(), BudgetExceeded> {
        let mut state = self.state();
        state.spend(bytes.len())?;
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
        Ok(())
    }

    fn emit_line(&self, stdio: Stdio, line: &[u8]) {
        let line = text::bounded_bytes(line.strip_suffix(b"\r").unwrap_or(line), REASON_MAX);
        let level = match stdio {
            Stdio::Stdout => Level::INFO,
            Stdio::Stderr => Level::WARN,
        };
        self.emit(level, stdio.name(), "", &line);
    }

    /// A line of the job's log: on the tape, if it has one, and in the host's log unless
    /// the tape plays a recording.
    fn emit(&self, level: Level, source: &str, fields: &str, message: &str) {
        if let Some(tape) = &self.tape {
            tape.log(LogLine {
                level: level.as_str().to_ascii_lowercase(),
                source: source.to_owned(),
                message: message.to_owned(),
                fields: fields.to_owned(),
            });
            if tape.playing() {
                return;
            }
        }
        emit(level, &self.tags, source, fields, message);
    }

    fn state(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SinkState {
    fn spend(&mut self, cost: usize) -> Result<(), BudgetExceeded> {
        if let Some(exceeded) = &self.exceeded {
            return Err(exceeded.clone());
        }
        match self.budget.checked_sub(cost) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => {
                let exceeded = BudgetExceeded::LogBytes { limit: self.limit };
                self.exceeded = Some(exceeded.clone());
                Err(exceeded)
            }
        }
    }

    /// Whether `cost` more bytes may reach the log; if not they are counted as dropped.
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
        self.sink
            .write(self.stdio, &bytes)
            .map_err(|exceeded| StreamError::Trap(wasmtime::Error::new(exceeded)))
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
        let written = self.sink.write(self.stdio, buf).map(|()| buf.len());
        Poll::Ready(written.map_err(io::Error::other))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(log_bytes: usize) -> Arc<LogSink> {
        let plugin: Arc<str> = "test".into();
        let tags = LogTags::new(
            &plugin,
            "test.Job",
            Uuid::nil(),
            1,
            Some(JobTrace::start(None)),
        );
        LogSink::new(tags, log_bytes, None)
    }

    #[test]
    fn log_bytes_beyond_the_budget_are_refused_and_every_later_call_too() {
        let sink = sink(100);
        let log =
            |message: &str, fields: &[(&str, &str)]| sink.log(GuestLevel::Info, message, fields);
        log(&"m".repeat(50), &[("k", "vvvvvvvvv")]).expect("within the budget");
        log(&"m".repeat(40), &[]).expect("exactly the budget");
        let err = log("", &[("k", "")]).expect_err("one byte more");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: more than 100 bytes of log output in one job"
        );
        assert_eq!(
            sink.exceeded(),
            Some(err),
            "the overrun is kept for the reason"
        );
        assert!(
            log("", &[]).is_err(),
            "a trapped job's sink takes nothing more"
        );
    }

    #[test]
    fn stdout_writes_count_against_the_same_budget() {
        let sink = sink(10);
        sink.write(Stdio::Stdout, b"12345\n")
            .expect("within the budget");
        sink.log(GuestLevel::Info, "1234", &[] as &[(&str, &str)])
            .expect("exactly the budget");
        let err = sink
            .write(Stdio::Stderr, b"x")
            .expect_err("stderr is charged too");
        assert!(
            matches!(err, BudgetExceeded::LogBytes { limit: 10 }),
            "{err}"
        );
    }

    #[test]
    fn tags_bound_and_escape_a_guest_plugin_name_and_a_producer_job_type() {
        let plugin: Arc<str> = format!("evil\n{}", "p".repeat(1000)).into();
        let tags = LogTags::new(
            &plugin,
            "job\u{1b}[2J",
            Uuid::nil(),
            1,
            Some(JobTrace::start(None)),
        );
        assert!(tags.plugin.starts_with("evil\\np"), "{}", tags.plugin);
        assert!(tags.plugin.len() <= NAME_MAX + text::MARKER_MAX);
        assert_eq!(tags.job_type, "job\\u{1b}[2J");
    }
}
