//! The console line, for people: time, level, the job it is about, the message, then only
//! the fields that add something.
//!
//! ```text
//! 05:41:08.123  INFO email.SendEmail 3f2a9c1e attempt=2 job failed, retrying error=job failed (retryable): smtp server busy retry_in=2s trace_id=4bf9…
//! ```
//!
//! - The job (`job_type`, the first 8 hex digits of `job_id`, `attempt`) comes from the
//!   event's own fields or, when it has none, from the `job` span it runs in ([`JobHeads`]
//!   keeps those), and is written once: span fields are never repeated after it.
//! - Fields that only a machine needs on every line (`span_id`, `parent_id`, `sampled`,
//!   the guest's `source` when it is a `log` call, the serving `plugin` of a job line) are
//!   left out; `--log-format json` writes every field of every event, one object a line.
//! - A guest's own key-value pairs (`fields`) follow the message as they are, and an empty
//!   set writes nothing.
//! - The trace id, when there is one, comes last: it finds a trace's other lines.
//! - The target (module path) is written only for other crates' events, such as a library's
//!   warning, where it says who is speaking.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The name of the span each delivery runs in (see the worker's `deliver`).
const JOB_SPAN: &str = "job";

/// Fields never written on a console line.
const MACHINE_ONLY: [&str; 3] = ["span_id", "parent_id", "sampled"];

/// The job a line is about.
#[derive(Debug, Clone, Default)]
struct JobHead {
    job_type: Option<String>,
    job_id: Option<String>,
    attempt: Option<String>,
}

impl JobHead {
    fn is_empty(&self) -> bool {
        self.job_type.is_none() && self.job_id.is_none() && self.attempt.is_none()
    }

    /// Take `name`'s value if it is one of the job's fields.
    fn take(&mut self, name: &str, value: &str) -> bool {
        let slot = match name {
            "job_type" => &mut self.job_type,
            "job_id" => &mut self.job_id,
            "attempt" => &mut self.attempt,
            _ => return false,
        };
        *slot = Some(value.to_owned());
        true
    }

    fn write(&self, out: &mut String) {
        if let Some(job_type) = &self.job_type {
            let _ = write!(out, "{job_type} ");
        }
        if let Some(job_id) = &self.job_id {
            let short: String = job_id.chars().take(8).collect();
            let _ = write!(out, "{short} ");
        }
        if let Some(attempt) = &self.attempt {
            let _ = write!(out, "attempt={attempt} ");
        }
    }
}

/// An event's fields, split into the message, the job, and the rest.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    head: JobHead,
    rest: Vec<(&'static str, String)>,
}

impl Fields {
    fn record(&mut self, field: &Field, value: String) {
        let name = field.name();
        if name == "message" {
            self.message = value;
        } else if !self.head.take(name, &value) {
            self.rest.push((name, value));
        }
    }
}

impl Visit for Fields {
    /// A string field is quoted, as `tracing`'s own format does, so a value with spaces
    /// cannot pose as more fields; the job's own fields are names and ids, shown bare.
    fn record_str(&mut self, field: &Field, value: &str) {
        if matches!(field.name(), "job_type" | "job_id" | "attempt") {
            self.record(field, value.to_owned());
        } else {
            self.record(field, format!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

/// Keeps the job fields of each `job` span, for the lines written inside it.
#[derive(Debug, Default)]
pub(crate) struct JobHeads;

impl<S> Layer<S> for JobHeads
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != JOB_SPAN {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields.head);
        }
    }
}

/// The console line; see the [module doc](self).
#[derive(Debug)]
pub(crate) struct PeopleFormat {
    pub(crate) ansi: bool,
}

impl<S, N> FormatEvent<S, N> for PeopleFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.head.is_empty() {
            let from_span = ctx.event_scope().and_then(|scope| {
                scope
                    .from_root()
                    .find_map(|span| span.extensions().get::<JobHead>().cloned())
            });
            if let Some(head) = from_span {
                fields.head = head;
            }
        }
        let metadata = event.metadata();
        let mut line = String::with_capacity(160);
        let (dim, reset) = if self.ansi {
            ("\x1b[2m", "\x1b[0m")
        } else {
            ("", "")
        };
        let _ = write!(line, "{dim}{}{reset} ", clock());
        let _ = write!(line, "{} ", level(*metadata.level(), self.ansi));
        if !metadata.target().starts_with("jobhost") {
            let _ = write!(line, "{dim}{}:{reset} ", metadata.target());
        }
        let is_job_line = !fields.head.is_empty();
        fields.head.write(&mut line);
        line.push_str(&fields.message);
        // The trace id is for finding the other lines of a trace, not for reading: last.
        fields.rest.sort_by_key(|(name, _)| *name == "trace_id");
        for (name, value) in &fields.rest {
            let skip = MACHINE_ONLY.contains(name)
                || (*name == "plugin" && is_job_line)
                || (*name == "source" && value == "\"log\"");
            if skip || value.is_empty() {
                continue;
            }
            if *name == "fields" {
                let _ = write!(line, " {value}");
            } else {
                let _ = write!(line, " {dim}{name}={reset}{value}");
            }
        }
        writeln!(writer, "{line}")
    }
}

/// The level, padded to five columns, coloured on a terminal.
fn level(level: Level, ansi: bool) -> String {
    let colour = match level {
        Level::ERROR => "31",
        Level::WARN => "33",
        Level::INFO => "32",
        Level::DEBUG => "34",
        Level::TRACE => "35",
    };
    if ansi {
        format!("\x1b[{colour}m{level:>5}\x1b[0m")
    } else {
        format!("{level:>5}")
    }
}

/// The time of day in UTC, to the millisecond: a person reads the line as it is written,
/// so the date adds nothing; JSON lines carry the full timestamp.
fn clock() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing::{debug_span, info};
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("lines").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Self;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn written(log: impl FnOnce()) -> String {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(JobHeads).with(
            tracing_subscriber::fmt::layer()
                .event_format(PeopleFormat { ansi: false })
                .with_writer(lines.clone()),
        );
        tracing::subscriber::with_default(subscriber, log);
        let bytes = lines.0.lock().expect("lines").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    const JOB_ID: &str = "3f2a9c1e-8d4b-4c5e-9f00-1234567890ab";

    #[test]
    fn a_job_line_says_the_job_once_then_the_message_then_what_adds_something() {
        let text = written(|| {
            let span = debug_span!(
                "job",
                job_id = JOB_ID,
                job_type = "email.SendEmail",
                attempt = 2,
                trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
                span_id = "00f067aa0ba902b7",
            );
            let _entered = span.enter();
            info!(
                job_id = JOB_ID,
                job_type = "email.SendEmail",
                attempt = 2,
                trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
                span_id = "00f067aa0ba902b7",
                error = "job failed (retryable): smtp server busy",
                "job failed, retrying"
            );
        });
        let line = text.lines().next().expect("a line");
        let after_clock = &line[13..];
        assert_eq!(
            after_clock,
            " INFO email.SendEmail 3f2a9c1e attempt=2 job failed, retrying \
             error=\"job failed (retryable): smtp server busy\" \
             trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\""
        );
        assert_eq!(line.matches("email.SendEmail").count(), 1, "{line}");
        assert!(!line.contains("span_id"), "{line}");
    }

    #[test]
    fn a_line_inside_a_job_span_takes_the_job_from_the_span() {
        let text = written(|| {
            let span = debug_span!("job", job_id = JOB_ID, job_type = "t", attempt = 1);
            let _entered = span.enter();
            info!(follow_ups = 0, "job completed");
        });
        assert!(
            text.ends_with(" INFO t 3f2a9c1e attempt=1 job completed follow_ups=0\n"),
            "{text}"
        );
    }

    #[test]
    fn a_guest_line_shows_its_own_fields_and_no_empty_ones() {
        let text = written(|| {
            info!(
                target: "jobhost::guest",
                plugin = "email-sender",
                job_type = "email.SendEmail",
                job_id = JOB_ID,
                attempt = 1,
                source = "log",
                fields = tracing::field::display("to=\"alice@example.com\""),
                "email sent"
            );
            info!(
                target: "jobhost::guest",
                job_type = "t",
                job_id = JOB_ID,
                attempt = 1,
                source = "stdout",
                fields = tracing::field::display(""),
                "hello"
            );
        });
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with(
                r#"email.SendEmail 3f2a9c1e attempt=1 email sent to="alice@example.com""#
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].ends_with(r#"t 3f2a9c1e attempt=1 hello source="stdout""#),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn another_crates_line_names_its_target() {
        let text = written(|| info!(target: "lapin::channel", "connection blocked"));
        assert!(
            text.ends_with(" INFO lapin::channel: connection blocked\n"),
            "{text}"
        );
    }
}
