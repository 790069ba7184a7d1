//! One request through the host's `wasi:http/outgoing-handler`, blocking the job (a job
//! is one synchronous call, and the host's timeouts bound the wait).
//!
//! Order matters: the request is handed to the host before its body is written, because
//! the host streams the body to the server, and a body larger than the pipe between them
//! would otherwise never finish writing.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    self, ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

use super::{HttpError, HttpErrorKind, Method, Request, Response, error, url};

/// The most a `blocking-write-and-flush` takes at once (the WASI contract).
const WRITE_CHUNK: usize = 4096;
/// How much one read asks for.
const READ_CHUNK: u64 = 64 * 1024;

/// Sends `request` and reads the whole response.
pub(super) fn send(request: &Request) -> Result<Response, HttpError> {
    let label = request.label();
    let invalid = |why: String| HttpError::new(HttpErrorKind::Invalid, format!("{label} {why}"));
    let target =
        url::split(request.url()).map_err(|why| invalid(format!("cannot be sent: {why}")))?;
    let outgoing = OutgoingRequest::new(headers(request).map_err(invalid)?);
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let parts_set = outgoing.set_method(&method(request.method())).is_ok()
        && outgoing.set_scheme(Some(&scheme)).is_ok()
        && outgoing.set_authority(Some(target.authority)).is_ok()
        && outgoing
            .set_path_with_query(Some(&target.path_and_query))
            .is_ok();
    if !parts_set {
        return Err(invalid(
            "cannot be sent: the host refused its URL or method".to_owned(),
        ));
    }
    let body = outgoing
        .body()
        .map_err(|()| invalid("cannot be sent: its body was taken".to_owned()))?;
    let failed = |code: ErrorCode| HttpError::from_code(&code, &label);
    let future = outgoing_handler::handle(outgoing, options(request)).map_err(failed)?;
    write_body(&body, request.body()).map_err(failed)?;
    OutgoingBody::finish(body, None).map_err(failed)?;

    future.subscribe().block();
    let incoming = match future.get() {
        Some(Ok(result)) => result.map_err(failed)?,
        // `block` returned, so the response is ready, and it is taken only here.
        Some(Err(())) | None => unreachable!("a ready response is taken once"),
    };
    let status = incoming.status();
    let headers = incoming
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
        .collect();
    let body = incoming
        .consume()
        .map_err(|()| failed(ErrorCode::InternalError(Some("the body was taken".into()))))?;
    let bytes = read_body(&body).map_err(failed)?;
    // The trailers are not read: dropping their future is allowed.
    drop(IncomingBody::finish(body));
    let mut response = Response::new(status).with_body(bytes);
    response.headers = headers;
    Ok(response)
}

/// The request's headers, or why one is refused.
fn headers(request: &Request) -> Result<Fields, String> {
    Fields::from_list(&request.wire_headers()).map_err(|error| {
        let why = match error {
            types::HeaderError::Forbidden => "is one the host sets itself",
            _ => "is malformed",
        };
        let names: Vec<&str> = request
            .headers()
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        format!(
            "cannot be sent: one of its headers ({}) {why}",
            names.join(", ")
        )
    })
}

fn method(method: Method) -> WasiMethod {
    match method {
        Method::Get => WasiMethod::Get,
        Method::Head => WasiMethod::Head,
        Method::Post => WasiMethod::Post,
        Method::Put => WasiMethod::Put,
        Method::Delete => WasiMethod::Delete,
        Method::Options => WasiMethod::Options,
        Method::Patch => WasiMethod::Patch,
    }
}

/// The request's timeout as `wasi:http` options; a host that does not take one keeps its
/// own, which bounds every request anyway.
fn options(request: &Request) -> Option<RequestOptions> {
    let timeout = request.timeout()?;
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(nanos));
    let _ = options.set_first_byte_timeout(Some(nanos));
    let _ = options.set_between_bytes_timeout(Some(nanos));
    Some(options)
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), ErrorCode> {
    if bytes.is_empty() {
        return Ok(());
    }
    let stream: OutputStream = body
        .write()
        .map_err(|()| ErrorCode::InternalError(Some("the request body was taken".into())))?;
    for chunk in bytes.chunks(WRITE_CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(stream_error)?;
    }
    Ok(())
}

fn read_body(body: &IncomingBody) -> Result<Vec<u8>, ErrorCode> {
    let stream: InputStream = body
        .stream()
        .map_err(|()| ErrorCode::InternalError(Some("the response body was taken".into())))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(bytes),
            Err(error) => return Err(stream_error(error)),
        }
    }
}

/// The HTTP failure behind a failed stream operation.
fn stream_error(error: StreamError) -> ErrorCode {
    match error {
        StreamError::LastOperationFailed(error) => types::http_error_code(&error)
            .unwrap_or_else(|| error::uncoded(error.to_debug_string())),
        StreamError::Closed => ErrorCode::ConnectionTerminated,
    }
}
