//! What a response means for the job ([`job_result`], the table of the module doc), and
//! the bounded excerpts reasons quote. Pure: a status, headers, a body and the time.

use std::time::{Duration, SystemTime};

use super::Response;
use crate::{JobError, MAX_DELAY};

/// The most of a body a reason quotes, in bytes (before the escapes of control characters
/// and the closing note).
pub(super) const EXCERPT_BYTES: usize = 512;

/// What `response` means for the job at `now` (the clock an HTTP-date `Retry-After`
/// is counted from).
pub(super) fn job_result(response: &Response, now: SystemTime) -> Result<(), JobError> {
    let status = response.status();
    let answered = format!("{} answered {}", response.label, status_line(status));
    match status {
        200..=299 => Ok(()),
        429 | 503 => match response
            .header("retry-after")
            .and_then(|v| retry_after(v, now))
        {
            Some(asked) => Err(deferral(asked, &answered)),
            None => Err(JobError::retryable(with_body(
                format!("{answered} without a usable Retry-After"),
                response.body(),
            ))),
        },
        500..=599 => Err(JobError::retryable(with_body(answered, response.body()))),
        400..=499 => Err(JobError::fatal(with_body(answered, response.body()))),
        300..=399 => Err(JobError::fatal(format!(
            "{answered}, a redirect to `{}` the request does not follow (see \
             `follow_redirects`)",
            bounded(response.header("location").unwrap_or("").as_bytes(), 256)
        ))),
        _ => Err(JobError::fatal(with_body(
            format!("{answered}, which is no final HTTP status"),
            response.body(),
        ))),
    }
}

/// The deferral a server asked for, capped at the longest hold.
fn deferral(asked: Duration, answered: &str) -> JobError {
    if asked > MAX_DELAY {
        return JobError::retry_after(
            MAX_DELAY,
            format!(
                "{answered}, Retry-After {}s, capped at the longest hold of {MAX_DELAY:?}",
                asked.as_secs()
            ),
        );
    }
    JobError::retry_after(asked, format!("{answered}, Retry-After {asked:?}"))
}

/// The wait a `Retry-After` value asks for at `now`: delta-seconds, or an HTTP date (a
/// past date is no wait). `None` when it is neither.
pub(super) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only, so a failure is a number beyond u64: longer than any hold anyway.
        return Some(value.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `reason`, then `: ` and an excerpt of `body` when it has one.
fn with_body(reason: String, body: &[u8]) -> String {
    let excerpt = excerpt(body);
    if excerpt.is_empty() {
        reason
    } else {
        format!("{reason}: {excerpt}")
    }
}

/// At most [`EXCERPT_BYTES`] of `body`, trimmed, read lossily as UTF-8, control
/// characters escaped, and saying how long the whole was when it is cut.
pub(super) fn excerpt(body: &[u8]) -> String {
    let shown = bounded(body.trim_ascii(), EXCERPT_BYTES);
    if body.trim_ascii().len() > EXCERPT_BYTES {
        format!("{shown} ({} bytes in all)", body.len())
    } else {
        shown
    }
}

/// The first `max` bytes of `bytes` as one line: read lossily as UTF-8, characters escaped
/// as [`crate::text`] says (`\n`, `\u{1b}`, `\u{202e}`), `…` where it was cut.
pub(super) fn bounded(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len() > max;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]);
    let mut line = String::with_capacity(text.len());
    for c in text.chars() {
        crate::text::push(&mut line, c);
    }
    if cut {
        line.push('…');
    }
    line
}

/// `429 Too Many Requests`: the status and its reason phrase, when it has a common one.
fn status_line(status: u16) -> String {
    let phrase = match status {
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return status.to_string(),
    };
    format!("{status} {phrase}")
}

#[cfg(test)]
mod tests;
