//! Recording and replay as a capability of the store: a job's [`Tape`] either writes down
//! every answer the host gives the guest, or plays a [`Recording`]'s answers back.
//!
//! The tape owns its wiring: the clocks and random generators it puts in the job's WASI
//! context ([`Tape::wire`]), and the hooks the imports call (`config`, `enqueue`, `http`,
//! the log sink). Recording changes nothing the guest sees. Playing answers from the
//! recording only, so a replay needs no network, no broker and no secret:
//! - clocks answer their recorded readings in order (the last one again once they run out);
//! - randomness comes from the recorded seeds;
//! - each call that reaches outside (config, enqueue, HTTP) must be the next recorded call,
//!   with the same key, job type, or method and URL. The first one that is not is the
//!   replay's divergence: it fails in the guest (an HTTP error, a trap for the others) and
//!   every later call fails the same way, so a new version is never given invented answers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use rand_wasi::SeedableRng as _;
use rand_wasi::rngs::StdRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};
use wasmtime_wasi_http::{Error, WasiBody};

use crate::job::recording::{
    Body, ConfigAnswer, HttpError, HttpResponse, Import, LOG_LINES_MAX, LogLine,
    RECORDING_MAX_BYTES, Seeds,
};
use crate::job::{Recording, recording::RecordedOutcome};

/// The code a request is recorded with until its answer comes: an attempt that ended first
/// never had one.
const NO_ANSWER: &str = "no-answer";

/// A recorded response, or the error the guest got.
pub(super) type HttpAnswer = Result<http::Response<WasiBody>, Error>;

/// What a replay answers a call: now, or never, as the recorded attempt was never answered.
pub(super) enum Answer<T> {
    Now(T),
    Never,
}

/// A job's tape, shared by its store, its log sink and its requests in flight.
#[derive(Clone)]
pub(super) struct Tape(Arc<Mutex<State>>);

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tape")
            .field("playing", &self.playing())
            .finish_non_exhaustive()
    }
}

struct State {
    seeds: RawSeeds,
    /// What was recorded, or what a replay saw, in call order.
    imports: Vec<Import>,
    log: Vec<LogLine>,
    bytes: usize,
    cut: Option<usize>,
    play: Option<Player>,
    /// HTTP answers whose body is still being read: the index of their import, and the
    /// bytes read so far.
    bodies: Vec<(usize, Arc<Mutex<BodyTap>>)>,
    /// When the attempt started, for when each request failed.
    started: std::time::Instant,
}

struct RawSeeds {
    secure: [u8; 32],
    insecure: [u8; 32],
    insecure_seed: u128,
}

/// What a replay answers from, and what it saw.
struct Player {
    wall: VecDeque<u64>,
    last_wall: u64,
    monotonic: VecDeque<u64>,
    last_monotonic: u64,
    /// The recorded calls not yet made, with their index in the recording.
    calls: VecDeque<(usize, Import)>,
    /// The recording was cut after this many imports.
    cut: Option<usize>,
    /// The recorded attempt's timeout, in milliseconds, if the attempt ended at it; none
    /// when it ended otherwise.
    timed_out_at: Option<u64>,
    trace: Vec<String>,
    divergence: Option<String>,
}

/// What a replay did.
#[derive(Debug)]
pub struct Replayed {
    /// How the replayed attempt ended.
    pub outcome: RecordedOutcome,
    /// The guest's log lines.
    pub log: Vec<LogLine>,
    /// Each import call with the answer it got, when asked for.
    pub trace: Vec<String>,
    /// The first call where the guest left the recording, if it did.
    pub divergence: Option<String>,
}

impl Tape {
    /// A tape that records, with fresh seeds.
    pub(super) fn record() -> Self {
        let seeds = RawSeeds {
            secure: rand::random(),
            insecure: rand::random(),
            insecure_seed: rand::random(),
        };
        Self::new(seeds, None)
    }

    /// A tape that plays `recording` back.
    pub(super) fn play(recording: &Recording) -> Self {
        let seeds = RawSeeds {
            secure: from_hex(&recording.seeds.secure),
            insecure: from_hex(&recording.seeds.insecure),
            insecure_seed: u128::from_be_bytes(from_hex(&recording.seeds.insecure_seed)),
        };
        let reading = |clock: fn(&Import) -> Option<u64>| -> VecDeque<u64> {
            recording.imports.iter().filter_map(clock).collect()
        };
        let player = Player {
            wall: reading(|import| match import {
                Import::WallClock { ns } => Some(*ns),
                _ => None,
            }),
            last_wall: 0,
            monotonic: reading(|import| match import {
                Import::MonotonicClock { ns } => Some(*ns),
                _ => None,
            }),
            last_monotonic: 0,
            calls: (recording.imports.iter().cloned().enumerate())
                .filter(|(_, import)| import.is_call())
                .collect(),
            cut: recording.cut,
            timed_out_at: (recording.outcome.kind == "crashed"
                && recording.outcome.reason.as_deref() == Some(&*timed_out_reason(recording)))
            .then_some(recording.job.timeout_ms),
            trace: Vec::new(),
            divergence: None,
        };
        Self::new(seeds, Some(player))
    }

    fn new(seeds: RawSeeds, play: Option<Player>) -> Self {
        Self(Arc::new(Mutex::new(State {
            seeds,
            imports: Vec::new(),
            log: Vec::new(),
            bytes: 0,
            cut: None,
            play,
            bodies: Vec::new(),
            started: std::time::Instant::now(),
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this tape plays a recording back.
    pub(super) fn playing(&self) -> bool {
        self.state().play.is_some()
    }

    /// Put the tape's clocks and random generators into a job's WASI context.
    pub(super) fn wire(&self, wasi: &mut WasiCtxBuilder) {
        let state = self.state();
        let seeds = &state.seeds;
        wasi.wall_clock(Clock(self.clone()))
            .monotonic_clock(Clock(self.clone()))
            .secure_random(StdRng::from_seed(seeds.secure))
            .insecure_random(StdRng::from_seed(seeds.insecure))
            .insecure_random_seed(seeds.insecure_seed);
    }

    /// Keep `import`, unless the recording is full.
    fn keep(state: &mut State, import: Import) -> Option<usize> {
        if state.cut.is_some() {
            return None;
        }
        let size = import.size();
        if state.bytes + size > RECORDING_MAX_BYTES {
            state.cut = Some(state.imports.len());
            return None;
        }
        state.bytes += size;
        state.imports.push(import);
        Some(state.imports.len() - 1)
    }

    /// A line the guest logged.
    pub(super) fn log(&self, line: LogLine) {
        let mut state = self.state();
        if state.log.len() < LOG_LINES_MAX {
            state.log.push(line);
        }
    }

    /// The answer to a config read. Recording, `lookup` gives the value and whether it is
    /// a secret, and the guest gets the value; playing, the guest gets the recorded answer
    /// (a placeholder for a secret), or the divergence stops it.
    pub(super) fn config(
        &self,
        key: &str,
        lookup: impl FnOnce() -> Option<(String, bool)>,
    ) -> wasmtime::Result<Option<String>> {
        let mut state = self.state();
        if state.play.is_none() {
            let found = lookup();
            let answer = answer_of(found.as_ref());
            Self::keep(
                &mut state,
                Import::Config {
                    key: key.to_owned(),
                    answer,
                },
            );
            return Ok(found.map(|(value, _)| value));
        }
        let asked = Import::Config {
            key: key.to_owned(),
            answer: ConfigAnswer::Missing,
        };
        match state.next_call(&asked)? {
            Import::Config { answer, .. } => Ok(secret_or(&answer, key)),
            _ => unreachable!("next_call matched the kind"),
        }
    }

    /// The answer to `get-all`, as [`Tape::config`] answers `get`; `lookup` gives each
    /// key, its value and whether it is a secret.
    pub(super) fn config_all(
        &self,
        lookup: impl FnOnce() -> Vec<(String, String, bool)>,
    ) -> wasmtime::Result<Vec<(String, String)>> {
        let mut state = self.state();
        if state.play.is_none() {
            let found = lookup();
            let entries = found
                .iter()
                .map(|(key, value, secret)| {
                    (key.clone(), answer_of(Some(&(value.clone(), *secret))))
                })
                .collect();
            Self::keep(&mut state, Import::ConfigAll { entries });
            return Ok(found
                .into_iter()
                .map(|(key, value, _)| (key, value))
                .collect());
        }
        let asked = Import::ConfigAll {
            entries: Vec::new(),
        };
        let entries = match state.next_call(&asked)? {
            Import::ConfigAll { entries } => entries,
            _ => unreachable!("next_call matched the kind"),
        };
        Ok(entries
            .iter()
            .filter_map(|(key, answer)| Some((key.clone(), secret_or(answer, key)?)))
            .collect())
    }

    /// The answer to `enqueue`: `answer` when recording; the recorded id when playing.
    pub(super) fn enqueue(
        &self,
        job_type: &str,
        answer: Result<String, String>,
    ) -> wasmtime::Result<Result<String, String>> {
        let mut state = self.state();
        if state.play.is_none() {
            let job_type = job_type.to_owned();
            Self::keep(
                &mut state,
                Import::Enqueue {
                    job_type,
                    answer: answer.clone(),
                },
            );
            return Ok(answer);
        }
        let asked = Import::Enqueue {
            job_type: job_type.to_owned(),
            answer,
        };
        match state.next_call(&asked)? {
            Import::Enqueue { answer, .. } => Ok(answer),
            _ => unreachable!("next_call matched the kind"),
        }
    }

    /// When playing, the recorded response to a request: `None` when recording, and the
    /// caller sends it.
    pub(super) fn http_answer(&self, method: &str, url: &str) -> Option<Answer<HttpAnswer>> {
        let mut state = self.state();
        state.play.as_ref()?;
        let asked = Import::Http {
            method: method.to_owned(),
            url: url.to_owned(),
            answer: Err(HttpError {
                code: String::new(),
                detail: None,
                after_ms: None,
            }),
        };
        let timed_out_at = state.play.as_ref().and_then(|player| player.timed_out_at);
        let answer = match state.next_call(&asked) {
            Ok(Import::Http { answer, .. }) => answer,
            Ok(_) => unreachable!("next_call matched the kind"),
            Err(stop) => {
                return Some(Answer::Now(Err(Error::InternalError(Some(
                    stop.to_string(),
                )))));
            }
        };
        Some(match answer {
            // The attempt ended (its timeout, most often) before this request was answered;
            // or the request failed at the attempt's deadline (its own deadline is the job's)
            // and the attempt's timeout, not the error, ended it: the replay waits as long.
            Err(error) if error.code == NO_ANSWER || at_deadline(&error, timed_out_at) => {
                Answer::Never
            }
            Err(error) => Answer::Now(Err(error_of(&error))),
            Ok(response) => Answer::Now(Ok(replayed(response))),
        })
    }

    /// A request the host is about to send: its place on the tape, to which
    /// [`Tape::http_sent`] adds the answer.
    pub(super) fn http_request(&self, method: &str, url: &str) -> Option<usize> {
        let mut state = self.state();
        let import = Import::Http {
            method: method.to_owned(),
            url: url.to_owned(),
            answer: Err(HttpError {
                code: NO_ANSWER.to_owned(),
                detail: None,
                after_ms: None,
            }),
        };
        Self::keep(&mut state, import)
    }

    /// The response the request at `index` got: its head is written down, and its body
    /// is read through a tap that writes down what the guest reads.
    pub(super) fn http_sent(
        &self,
        index: Option<usize>,
        response: http::Response<WasiBody>,
    ) -> http::Response<WasiBody> {
        let Some(index) = index else {
            return response;
        };
        let headers: Vec<(String, String)> = (response.headers().iter())
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        let answer = Ok(HttpResponse {
            status: response.status().as_u16(),
            headers,
            body: Body::default(),
            body_error: None,
        });
        let tap = Arc::new(Mutex::new(BodyTap::default()));
        {
            let mut state = self.state();
            if state.answer(index, answer) {
                state.bodies.push((index, Arc::clone(&tap)));
            }
        }
        let tape = self.clone();
        response.map(|inner| TappedBody { inner, tap, tape }.boxed_unsync())
    }

    /// The error the request at `index` failed with, written down.
    pub(super) fn http_failed(&self, index: Option<usize>, error: Error) -> Error {
        if let Some(index) = index {
            let mut state = self.state();
            let after = state.started.elapsed().as_millis();
            let failed = HttpError {
                after_ms: Some(u64::try_from(after).unwrap_or(u64::MAX)),
                ..code_of(&error)
            };
            state.answer(index, Err(failed));
        }
        error
    }

    /// The recording of an attempt that ended with `outcome`; bodies still being read are
    /// kept as far as they were read.
    pub(super) fn into_recording(
        self,
        job: crate::job::recording::RecordedJob,
        plugin: crate::job::recording::RecordedPlugin,
        recorded_at_ms: u64,
        outcome: RecordedOutcome,
    ) -> Recording {
        let mut state = self.state();
        let bodies = std::mem::take(&mut state.bodies);
        for (index, tap) in bodies {
            let tap = std::mem::take(&mut *tap.lock().unwrap_or_else(PoisonError::into_inner));
            if let Some(Import::Http {
                answer: Ok(response),
                ..
            }) = state.imports.get_mut(index)
            {
                // A replay must not pass off a cut body as the whole one: it ends there
                // with an error that says so.
                let cut = tap.cut.then(|| HttpError {
                    code: "internal-error".to_owned(),
                    detail: Some(format!(
                        "the recording was cut here, after {} bytes of the body",
                        tap.bytes.len()
                    )),
                    after_ms: None,
                });
                response.body = Body(tap.bytes);
                response.body_error = cut.or(tap.error);
            }
        }
        let seeds = Seeds {
            secure: hex(&state.seeds.secure),
            insecure: hex(&state.seeds.insecure),
            insecure_seed: hex(&state.seeds.insecure_seed.to_be_bytes()),
        };
        Recording {
            format: crate::job::recording::RECORDING_FORMAT,
            job,
            plugin,
            recorded_at_ms,
            outcome,
            seeds,
            imports: std::mem::take(&mut state.imports),
            log: std::mem::take(&mut state.log),
            cut: state.cut,
        }
    }

    /// What a replay that ended with `outcome` saw.
    pub(super) fn into_replayed(self, outcome: RecordedOutcome) -> Replayed {
        let mut state = self.state();
        let log = std::mem::take(&mut state.log);
        let mut player = state.play.take().expect("a playing tape");
        if player.divergence.is_none()
            && let Some((index, missed)) = player.calls.front()
        {
            player.divergence = Some(format!(
                "the recording's import #{} ({}) was never called",
                index + 1,
                missed.call()
            ));
        }
        Replayed {
            outcome,
            log,
            trace: player.trace,
            divergence: player.divergence,
        }
    }
}

impl State {
    /// Put the answer to the request at `index` in its place, unless that passes the
    /// recording's bound; whether it was kept.
    fn answer(&mut self, index: usize, answer: Result<HttpResponse, HttpError>) -> bool {
        let size = match &answer {
            Ok(response) => (response.headers.iter())
                .map(|(name, value)| name.len() + value.len())
                .sum(),
            Err(error) => error.code.len() + error.detail.as_ref().map_or(0, String::len),
        };
        if self.cut.is_some() || self.bytes + size > RECORDING_MAX_BYTES {
            self.cut.get_or_insert(index);
            return false;
        }
        self.bytes += size;
        if let Some(Import::Http { answer: slot, .. }) = self.imports.get_mut(index) {
            *slot = answer;
        }
        true
    }

    /// The recorded call the guest's `asked` must match; a mismatch, an extra call, or the
    /// end of a cut recording stops the replay there.
    fn next_call(&mut self, asked: &Import) -> Result<Import, Stop> {
        let player = self
            .play
            .as_mut()
            .expect("only a playing tape answers calls");
        if let Some(divergence) = &player.divergence {
            return Err(Stop(divergence.clone()));
        }
        let next = player.calls.pop_front();
        let problem = match &next {
            None => Some(match player.cut {
                Some(cut) => format!(
                    "the recording was cut after import #{cut} at {} bytes; {} is not recorded",
                    RECORDING_MAX_BYTES,
                    asked.call()
                ),
                None => format!("an extra call: {}", asked.call()),
            }),
            Some((index, recorded)) if !same_call(recorded, asked) => Some(format!(
                "import #{}: the recording has {}, the guest called {}",
                index + 1,
                recorded.call(),
                asked.call()
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            player.trace.push(format!("{} -> diverged", asked.call()));
            player.divergence = Some(problem.clone());
            return Err(Stop(problem));
        }
        let (_, recorded) = next.expect("checked above");
        player
            .trace
            .push(format!("{} -> {}", recorded.call(), recorded.answer()));
        Ok(recorded)
    }
}

/// A replay that stopped: the guest gets it as a trap, or as an HTTP error.
#[derive(Debug, thiserror::Error)]
#[error("replay stopped: {0}")]
pub(super) struct Stop(String);

fn same_call(recorded: &Import, asked: &Import) -> bool {
    match (recorded, asked) {
        (Import::Config { key: a, .. }, Import::Config { key: b, .. }) => a == b,
        (Import::ConfigAll { .. }, Import::ConfigAll { .. }) => true,
        (Import::Enqueue { job_type: a, .. }, Import::Enqueue { job_type: b, .. }) => a == b,
        (
            Import::Http {
                method: m1,
                url: u1,
                ..
            },
            Import::Http {
                method: m2,
                url: u2,
                ..
            },
        ) => m1 == m2 && u1 == u2,
        _ => false,
    }
}

/// Whether a request failed at the deadline of an attempt that ended at it, give or take the
/// moments between the attempt's start and its store's.
fn at_deadline(error: &HttpError, timed_out_at: Option<u64>) -> bool {
    const SLACK_MS: u64 = 20;
    error
        .after_ms
        .zip(timed_out_at)
        .is_some_and(|(after, timeout)| after.saturating_add(SLACK_MS) >= timeout)
}

/// The reason of a crash at the recorded attempt's timeout.
fn timed_out_reason(recording: &Recording) -> String {
    super::store::timed_out(Duration::from_millis(recording.job.timeout_ms))
}

/// How a found config value is recorded: a secret by its key only.
fn answer_of(found: Option<&(String, bool)>) -> ConfigAnswer {
    match found {
        None => ConfigAnswer::Missing,
        Some((_, true)) => ConfigAnswer::Secret,
        Some((value, false)) => ConfigAnswer::Value(value.clone()),
    }
}

/// What the guest reads for a config answer: a secret's placeholder names its key.
fn secret_or(answer: &ConfigAnswer, key: &str) -> Option<String> {
    match answer {
        ConfigAnswer::Missing => None,
        ConfigAnswer::Value(value) => Some(value.clone()),
        ConfigAnswer::Secret => Some(format!("(secret {key}: not recorded)")),
    }
}

/// Both clocks of a tape: they read the host's clocks and write the reading down, or
/// answer the recorded readings.
struct Clock(Tape);

impl HostWallClock for Clock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        let mut state = self.0.state();
        if let Some(player) = &mut state.play {
            player.last_wall = player.wall.pop_front().unwrap_or(player.last_wall);
            let ns = player.last_wall;
            player.trace.push(format!("wall-clock now -> {ns} ns"));
            return Duration::from_nanos(ns);
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let ns = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        Tape::keep(&mut state, Import::WallClock { ns });
        now
    }
}

impl HostMonotonicClock for Clock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        let mut state = self.0.state();
        if let Some(player) = &mut state.play {
            player.last_monotonic = player
                .monotonic
                .pop_front()
                .unwrap_or(player.last_monotonic);
            let ns = player.last_monotonic;
            player.trace.push(format!("monotonic-clock now -> {ns} ns"));
            return ns;
        }
        let ns = monotonic_now();
        Tape::keep(&mut state, Import::MonotonicClock { ns });
        ns
    }
}

/// Nanoseconds on the host's monotonic clock, from a fixed point of this process.
fn monotonic_now() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// What a response body gave the guest so far.
#[derive(Default)]
struct BodyTap {
    bytes: Vec<u8>,
    error: Option<HttpError>,
    /// The guest read on past the recording's bound.
    cut: bool,
}

/// A response body that writes down what the guest reads, within the recording's bound.
struct TappedBody {
    inner: WasiBody,
    tap: Arc<Mutex<BodyTap>>,
    tape: Tape,
}

impl http_body::Body for TappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let mut state = self.tape.state();
                    if state.cut.is_none() && state.bytes + data.len() <= RECORDING_MAX_BYTES {
                        state.bytes += data.len();
                        drop(state);
                        let mut tap = self.tap.lock().unwrap_or_else(PoisonError::into_inner);
                        tap.bytes.extend_from_slice(data);
                    } else {
                        let len = state.imports.len();
                        state.cut.get_or_insert(len);
                        drop(state);
                        self.tap.lock().unwrap_or_else(PoisonError::into_inner).cut = true;
                    }
                }
            }
            Some(Err(error)) => {
                let mut tap = self.tap.lock().unwrap_or_else(PoisonError::into_inner);
                tap.error = Some(code_of(error));
            }
            None => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A recorded response, its body and the error that ended it as the guest read them.
fn replayed(response: HttpResponse) -> http::Response<WasiBody> {
    let mut builder = http::Response::builder().status(response.status);
    for (name, value) in &response.headers {
        builder = builder.header(name, value);
    }
    let body = ReplayedBody {
        body: Some(Bytes::from(response.body.0)),
        error: response.body_error,
    };
    builder.body(body.boxed_unsync()).unwrap_or_else(|_| {
        http::Response::new(
            http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
    })
}

/// A recorded body: its bytes in one frame, then its error, if it had one.
struct ReplayedBody {
    body: Option<Bytes>,
    error: Option<HttpError>,
}

impl http_body::Body for ReplayedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(body) = self.body.take().filter(|body| !body.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(body))));
        }
        Poll::Ready(self.error.take().map(|error| Err(error_of(&error))))
    }
}

/// An error's `error-code` case name and detail, as a recording keeps it.
fn code_of(error: &Error) -> HttpError {
    let (code, detail) = match error {
        Error::DnsTimeout => ("DNS-timeout", None),
        Error::DnsError { rcode, .. } => ("DNS-error", rcode.clone()),
        Error::DestinationNotFound => ("destination-not-found", None),
        Error::ConnectionRefused => ("connection-refused", None),
        Error::ConnectionTerminated => ("connection-terminated", None),
        Error::ConnectionTimeout => ("connection-timeout", None),
        Error::ConnectionReadTimeout => ("connection-read-timeout", None),
        Error::ConnectionLimitReached => ("connection-limit-reached", None),
        Error::TlsCertificateError => ("TLS-certificate-error", None),
        Error::HttpRequestUriInvalid => ("HTTP-request-URI-invalid", None),
        Error::HttpResponseIncomplete => ("HTTP-response-incomplete", None),
        Error::HttpResponseBodySize(cap) => ("HTTP-response-body-size", cap.map(|c| c.to_string())),
        Error::HttpResponseTimeout => ("HTTP-response-timeout", None),
        Error::InternalError(message) => ("internal-error", message.clone()),
        other => ("internal-error", Some(format!("{other:?}"))),
    };
    HttpError {
        code: code.to_owned(),
        detail,
        after_ms: None,
    }
}

/// The error a recorded code stands for; an unknown code is an internal error naming it.
fn error_of(error: &HttpError) -> Error {
    let detail = error.detail.clone();
    match error.code.as_str() {
        "DNS-timeout" => Error::DnsTimeout,
        "DNS-error" => Error::DnsError {
            rcode: detail,
            info_code: None,
        },
        "destination-not-found" => Error::DestinationNotFound,
        "connection-refused" => Error::ConnectionRefused,
        "connection-terminated" => Error::ConnectionTerminated,
        "connection-timeout" => Error::ConnectionTimeout,
        "connection-read-timeout" => Error::ConnectionReadTimeout,
        "connection-limit-reached" => Error::ConnectionLimitReached,
        "TLS-certificate-error" => Error::TlsCertificateError,
        "HTTP-request-URI-invalid" => Error::HttpRequestUriInvalid,
        "HTTP-response-incomplete" => Error::HttpResponseIncomplete,
        "HTTP-response-body-size" => {
            Error::HttpResponseBodySize(detail.and_then(|cap| cap.parse().ok()))
        }
        "HTTP-response-timeout" => Error::HttpResponseTimeout,
        "internal-error" => Error::InternalError(detail),
        other => Error::InternalError(Some(format!("{other}: {}", detail.unwrap_or_default()))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from hex digits; missing or bad digits read as zero, so a hand-edited seed
/// still replays (differently).
fn from_hex<const N: usize>(digits: &str) -> [u8; N] {
    let mut bytes = [0; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.as_bytes().chunks(2)) {
        *byte = std::str::from_utf8(pair)
            .ok()
            .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            .unwrap_or(0);
    }
    bytes
}
