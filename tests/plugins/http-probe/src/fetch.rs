//! One GET through `wasi:http`, the body counted as it is read and never kept whole.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{self, ErrorCode, Fields, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// Bytes of the body kept for the report.
const BODY_START: usize = 256;

/// Bytes asked for per read.
const CHUNK: u64 = 64 * 1024;

/// What one request saw.
pub(crate) struct Seen {
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) body_start: String,
    pub(crate) location: Option<String>,
    pub(crate) retry_after: Option<u64>,
}

/// GET `url` and read its whole body; the error is the host's error code, as text.
pub(crate) fn get(url: &str) -> Result<Seen, String> {
    let (scheme, authority, path) = split(url)?;
    let request = OutgoingRequest::new(Fields::new());
    let set = |ok: Result<(), ()>, what: &str| ok.map_err(|()| format!("cannot set the {what}"));
    set(request.set_method(&Method::Get), "method")?;
    set(request.set_scheme(Some(&scheme)), "scheme")?;
    set(request.set_authority(Some(authority)), "authority")?;
    set(request.set_path_with_query(Some(path)), "path")?;
    let pending = outgoing_handler::handle(request, None).map_err(|code| failed(&code))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("the response is not ready after waiting for it")?
        .map_err(|()| "the response was taken twice")?
        .map_err(|code| failed(&code))?;
    let headers = response.headers();
    let header = |name: &str| {
        headers
            .get(name)
            .first()
            .map(|value| String::from_utf8_lossy(value).into_owned())
    };
    let location = header("location");
    let retry_after = header("retry-after").and_then(|value| value.trim().parse().ok());
    drop(headers);
    let body = response
        .consume()
        .map_err(|()| "the body was taken twice")?;
    let stream = body
        .stream()
        .map_err(|()| "the body stream was taken twice")?;
    let mut bytes = 0u64;
    let mut start = Vec::new();
    loop {
        match stream.blocking_read(CHUNK) {
            Ok(chunk) => {
                bytes += chunk.len() as u64;
                let room = BODY_START.saturating_sub(start.len());
                start.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(err)) => {
                return Err(match types::http_error_code(&err) {
                    Some(code) => format!("after {bytes} bytes of the body: {}", failed(&code)),
                    None => format!("after {bytes} bytes of the body: {}", err.to_debug_string()),
                });
            }
        }
    }
    Ok(Seen {
        status: response.status(),
        bytes,
        body_start: String::from_utf8_lossy(&start).into_owned(),
        location,
        retry_after,
    })
}

/// The host's error code as the job's reason: the refusal's own message when it sent one.
fn failed(code: &ErrorCode) -> String {
    match code {
        ErrorCode::InternalError(Some(message)) => message.clone(),
        other => format!("{other:?}"),
    }
}

/// `scheme://authority/path?query` into its parts.
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
