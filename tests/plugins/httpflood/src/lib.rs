//! Test plugin `httpflood`: jobs that hand the host's `wasi:http` far more than a job's
//! budget allows, on the `wasip2` crate's raw bindings (not the SDK's HTTP client, which
//! never would), on queue `test.httpflood`.
//!
//! `httpflood.Flood` `{"mode": ..}` floods in the way its mode names, keeping every
//! resource it makes, and nothing is ever sent:
//!
//! | mode | what the job does |
//! |---|---|
//! | `method` | up to 1,000 requests, each with a 1 MiB method |
//! | `authority` | a request with a 1 MiB authority |
//! | `path` | a request with a 1 MiB path |
//! | `header` | a header map with a 1 MiB header value |
//! | `fields` | up to 10,000 header maps of seven 16 KiB values each |
//! | `resources` | up to a million empty header maps |
//! | `bodies` | up to 100,000 requests, each with its body written until it buffers no more |
//! | `calls` | sets one request's method a million times |
//! | `ok` | one request of ordinary parts, headers and a small body, dropped unsent |
//!
//! A flood the host lets through ends in a fatal error saying so. Every string fits a
//! 32 MiB memory cap.
//!
//! `httpflood.Upload` `{"url": ..}` POSTs to `url` and writes its body until the answer
//! comes, then goes on writing forever, keeping the answer: it fails (retryably) with
//! `the upload was cut after the answer, N bytes in: ..` once the host ends the upload.

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::OutputStream;

const MIB: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum FloodQueues {
    Httpflood,
}

/// Floods `wasi:http` as `mode` says.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "httpflood.Flood", queue = FloodQueues::Httpflood)]
struct Flood {
    mode: String,
}

/// Uploads to `url` past the answer.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "httpflood.Upload", queue = FloodQueues::Httpflood)]
struct Upload {
    url: String,
}

fn flood(job: Flood, _ctx: &JobContext) -> Result<(), JobError> {
    // Everything made is kept until the job ends, as a hostile guest would.
    let mut kept: Vec<Box<dyn std::any::Any>> = Vec::new();
    match job.mode.as_str() {
        "method" => {
            let method = Method::Other("M".repeat(MIB));
            for _ in 0..1_000 {
                let request = OutgoingRequest::new(Fields::new());
                let _ = request.set_method(&method);
                kept.push(Box::new(request));
            }
        }
        "authority" => {
            let request = OutgoingRequest::new(Fields::new());
            let _ = request.set_authority(Some(&"a".repeat(MIB)));
            kept.push(Box::new(request));
        }
        "path" => {
            let request = OutgoingRequest::new(Fields::new());
            let path = format!("/{}", "p".repeat(MIB - 1));
            let _ = request.set_path_with_query(Some(&path));
            kept.push(Box::new(request));
        }
        "header" => {
            let fields = Fields::new();
            let _ = fields.append("x-big", &vec![b'h'; MIB]);
            kept.push(Box::new(fields));
        }
        "fields" => {
            let entries: Vec<(String, Vec<u8>)> = (0..7)
                .map(|i| (format!("x-value-{i}"), vec![b'v'; 16 * 1024]))
                .collect();
            for _ in 0..10_000 {
                kept.push(Box::new(Fields::from_list(&entries)));
            }
        }
        "resources" => {
            for _ in 0..1_000_000 {
                kept.push(Box::new(Fields::new()));
            }
        }
        "bodies" => {
            for _ in 0..100_000 {
                let request = OutgoingRequest::new(Fields::new());
                let _ = request.set_method(&Method::Post);
                let Ok(body) = request.body() else { break };
                let Ok(stream) = body.write() else { break };
                fill(&stream);
                kept.push(Box::new((request, body, stream)));
            }
        }
        "calls" => {
            let request = OutgoingRequest::new(Fields::new());
            for _ in 0..1_000_000 {
                let _ = request.set_method(&Method::Get);
            }
        }
        "ok" => {
            let fields = Fields::from_list(&[("content-type".to_owned(), b"text/plain".to_vec())])
                .map_err(|err| JobError::fatal(format!("headers refused: {err:?}")))?;
            let request = OutgoingRequest::new(fields);
            let parts = request.set_method(&Method::Post).is_ok()
                && request.set_scheme(Some(&Scheme::Https)).is_ok()
                && request.set_authority(Some("example.com")).is_ok()
                && request.set_path_with_query(Some("/hook?x=1")).is_ok();
            if !parts {
                return Err(JobError::fatal("ordinary request parts refused"));
            }
            let body = request.body().map_err(|()| JobError::fatal("no body"))?;
            let stream = body.write().map_err(|()| JobError::fatal("no stream"))?;
            stream
                .write(b"hello")
                .map_err(|err| JobError::fatal(format!("write refused: {err:?}")))?;
            return Ok(());
        }
        other => return Err(JobError::fatal(format!("unknown mode {other}"))),
    }
    Err(JobError::fatal(format!(
        "the host let the flood through ({} resources kept)",
        kept.len()
    )))
}

/// Write to `stream` until it takes no more without waiting.
fn fill(stream: &OutputStream) {
    while let Ok(permit) = stream.check_write() {
        if permit == 0 {
            return;
        }
        let len = usize::try_from(permit).unwrap_or(usize::MAX).min(MIB);
        if stream.write(&vec![b'b'; len]).is_err() {
            return;
        }
    }
}

fn upload(job: Upload, _ctx: &JobContext) -> Result<(), JobError> {
    let (scheme, authority, path) = split(&job.url).map_err(JobError::fatal)?;
    let request = OutgoingRequest::new(Fields::new());
    let parts = request.set_method(&Method::Post).is_ok()
        && request.set_scheme(Some(&scheme)).is_ok()
        && request.set_authority(Some(authority)).is_ok()
        && request.set_path_with_query(Some(path)).is_ok();
    if !parts {
        return Err(JobError::fatal("the request's parts were refused"));
    }
    let body = request.body().map_err(|()| JobError::fatal("no body"))?;
    let stream = body.write().map_err(|()| JobError::fatal("no stream"))?;
    let pending = outgoing_handler::handle(request, None)
        .map_err(|code| JobError::retryable(format!("{code:?}")))?;
    let chunk = [b'u'; 4096];
    let mut sent = 0u64;
    let answered = pending.subscribe();
    let answer = loop {
        if answered.ready()
            && let Some(answer) = pending.get()
        {
            break answer;
        }
        stream.blocking_write_and_flush(&chunk).map_err(|err| {
            JobError::retryable(format!(
                "the upload ended before the answer, {sent} bytes in: {err:?}"
            ))
        })?;
        sent += chunk.len() as u64;
    };
    drop(answered);
    let _response = answer
        .map_err(|()| JobError::fatal("the answer was taken twice"))?
        .map_err(|code| JobError::retryable(format!("{code:?}")))?;
    loop {
        stream.blocking_write_and_flush(&chunk).map_err(|err| {
            JobError::retryable(format!(
                "the upload was cut after the answer, {sent} bytes in: {err:?}"
            ))
        })?;
        sent += chunk.len() as u64;
    }
}

/// `scheme://authority/path` into its parts.
fn split(url: &str) -> Result<(Scheme, &str, &str), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` has no scheme"))?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_owned()),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    Ok((scheme, authority, path))
}

jobhost_sdk::plugin!(
    queues = FloodQueues,
    jobs = {
        Flood => flood,
        Upload => upload,
    }
);
