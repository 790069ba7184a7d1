//! [`HttpError`]: a request that got no response, and what that means for the job.

#[cfg(any(target_arch = "wasm32", test))]
use wasip2::http::types::ErrorCode;

#[cfg(any(target_arch = "wasm32", test))]
use super::outcome::bounded;
use crate::JobError;

/// The start of the host's message for a request to an origin the operator has not
/// granted (the host's contract: an `internal-error` with this message).
#[cfg(any(target_arch = "wasm32", test))]
const NOT_GRANTED: &str = "outbound request to `";

/// The start of the message of a response body cut at `max_response_bytes`, followed by
/// `: N bytes` (the limit). A body stream's error reaches the guest without an
/// `error-code` (the host's `http-error-code` finds none for an error its body raises), so
/// this message is all that tells a body too large from a broken connection.
#[cfg(any(target_arch = "wasm32", test))]
const BODY_TOO_LARGE: &str = "HTTP response body size exceeds limit";

/// The most of a host's message an error keeps.
#[cfg(any(target_arch = "wasm32", test))]
const MESSAGE_BYTES: usize = 1024;

/// A request that got no response. `?` turns it into a [`JobError`]: retryable or fatal by
/// its [`kind`](Self::kind) (see [`HttpErrorKind::is_retryable`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HttpError {
    kind: HttpErrorKind,
    message: String,
}

/// What kind of failure an [`HttpError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HttpErrorKind {
    /// The operator has not granted this plugin the request's origin, or the host refused
    /// the request; the message is the host's, naming what to grant.
    Denied,
    /// No connection or no answer in time.
    Timeout,
    /// The connection could not be made or failed midway: refused, DNS, TLS, protocol.
    Connection,
    /// The response is larger than the operator allows (`max_response_bytes`).
    TooLarge,
    /// The request cannot be sent as written: its URL, method, a header or its size.
    Invalid,
    /// The host failed otherwise.
    Other,
}

impl HttpErrorKind {
    /// Whether trying again may succeed: timeouts, failed connections and other host
    /// failures; not a denial, a response too large or a request that cannot be sent,
    /// which a retry repeats.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Timeout | Self::Connection | Self::Other)
    }
}

impl HttpError {
    /// An error of `kind` saying `message`, as a test's responder fails a request.
    pub fn new(kind: HttpErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> HttpErrorKind {
        self.kind
    }

    /// The failure `wasi:http` reported for the request `label` (`GET http://host/path`).
    #[cfg(any(target_arch = "wasm32", test))]
    pub(super) fn from_code(code: &ErrorCode, label: &str) -> Self {
        use HttpErrorKind::{Connection, Denied, Invalid, Other, Timeout, TooLarge};
        let (kind, what) = match code {
            ErrorCode::InternalError(Some(message)) if message.starts_with(NOT_GRANTED) => {
                return Self::new(Denied, bounded(message.as_bytes(), MESSAGE_BYTES));
            }
            ErrorCode::HttpRequestDenied => (Denied, "was denied by the host".to_owned()),
            ErrorCode::DnsTimeout => (Timeout, "timed out resolving the host".to_owned()),
            ErrorCode::ConnectionTimeout => (Timeout, "timed out connecting".to_owned()),
            ErrorCode::HttpResponseTimeout => {
                (Timeout, "timed out waiting for the response".to_owned())
            }
            ErrorCode::ConnectionReadTimeout => {
                (Timeout, "timed out reading the response".to_owned())
            }
            ErrorCode::ConnectionWriteTimeout => {
                (Timeout, "timed out writing the request".to_owned())
            }
            ErrorCode::ConnectionRefused => (Connection, "was refused a connection".to_owned()),
            ErrorCode::ConnectionTerminated | ErrorCode::HttpResponseIncomplete => {
                (Connection, "lost its connection midway".to_owned())
            }
            ErrorCode::DnsError(payload) => (
                Connection,
                format!(
                    "failed to resolve the host ({})",
                    bounded(
                        payload.rcode.as_deref().unwrap_or("no answer").as_bytes(),
                        64
                    )
                ),
            ),
            ErrorCode::DestinationNotFound => (Connection, "found no such host".to_owned()),
            ErrorCode::DestinationUnavailable
            | ErrorCode::DestinationIpProhibited
            | ErrorCode::DestinationIpUnroutable => {
                (Connection, "could not reach the host".to_owned())
            }
            ErrorCode::ConnectionLimitReached => (
                Connection,
                "found the host's connections used up".to_owned(),
            ),
            ErrorCode::TlsProtocolError
            | ErrorCode::TlsCertificateError
            | ErrorCode::TlsAlertReceived(_) => (Connection, "failed in TLS".to_owned()),
            ErrorCode::HttpProtocolError
            | ErrorCode::HttpResponseTransferCoding(_)
            | ErrorCode::HttpResponseContentCoding(_)
            | ErrorCode::HttpUpgradeFailed => {
                (Connection, "got a malformed HTTP response".to_owned())
            }
            ErrorCode::HttpResponseBodySize(limit) => (
                TooLarge,
                format!(
                    "got a response body larger than the operator allows{}: \
                     `max_response_bytes` in `jobhost.toml`",
                    limit.map(|n| format!(" ({n} bytes)")).unwrap_or_default()
                ),
            ),
            ErrorCode::HttpResponseHeaderSectionSize(_)
            | ErrorCode::HttpResponseHeaderSize(_)
            | ErrorCode::HttpResponseTrailerSectionSize(_)
            | ErrorCode::HttpResponseTrailerSize(_) => {
                (TooLarge, "got response headers too large".to_owned())
            }
            ErrorCode::HttpRequestLengthRequired
            | ErrorCode::HttpRequestBodySize(_)
            | ErrorCode::HttpRequestUriTooLong
            | ErrorCode::HttpRequestHeaderSectionSize(_)
            | ErrorCode::HttpRequestHeaderSize(_)
            | ErrorCode::HttpRequestTrailerSectionSize(_)
            | ErrorCode::HttpRequestTrailerSize(_) => {
                (Invalid, "cannot be sent: it is too large".to_owned())
            }
            ErrorCode::HttpRequestMethodInvalid | ErrorCode::HttpRequestUriInvalid => (
                Invalid,
                "cannot be sent: its method or URL is invalid".to_owned(),
            ),
            ErrorCode::InternalError(message) => (
                Other,
                format!(
                    "failed in the host: {}",
                    bounded(
                        message.as_deref().unwrap_or("no detail").as_bytes(),
                        MESSAGE_BYTES
                    )
                ),
            ),
            ErrorCode::LoopDetected => (Other, "ran into a proxy loop".to_owned()),
            ErrorCode::ConfigurationError => {
                (Other, "failed on the host's HTTP configuration".to_owned())
            }
        };
        Self::new(kind, format!("{label} {what}"))
    }
}

/// The failure behind a body stream error that carries no `error-code`, from the host's
/// `message`: a body cut at the operator's limit (which no retry changes), else the host's
/// message as an internal error.
#[cfg(any(target_arch = "wasm32", test))]
pub(super) fn uncoded(message: String) -> ErrorCode {
    let first_line = message.lines().next().unwrap_or_default();
    match first_line.strip_prefix(BODY_TOO_LARGE) {
        Some(rest) => ErrorCode::HttpResponseBodySize(
            rest.strip_prefix(": ")
                .and_then(|rest| rest.strip_suffix(" bytes"))
                .and_then(|limit| limit.parse().ok()),
        ),
        None => ErrorCode::InternalError(Some(message)),
    }
}

impl From<HttpError> for JobError {
    fn from(error: HttpError) -> Self {
        if error.kind.is_retryable() {
            JobError::Retryable(error.message)
        } else {
            JobError::Fatal(error.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: &str = "POST http://hooks.test/in";

    fn job_error(code: ErrorCode) -> JobError {
        HttpError::from_code(&code, LABEL).into()
    }

    #[test]
    fn a_request_the_operator_has_not_granted_is_fatal_with_the_hosts_message() {
        let message = "outbound request to `http://hooks.test` is not allowed for plugin \
                       `webhook`: add \"http://hooks.test\" to `allowed_outbound_hosts` of \
                       `[plugins.webhook]` in jobhost.toml";
        let error = HttpError::from_code(&ErrorCode::InternalError(Some(message.into())), LABEL);
        assert_eq!(error.kind(), HttpErrorKind::Denied);
        assert_eq!(JobError::from(error), JobError::fatal(message));
        assert!(matches!(
            job_error(ErrorCode::HttpRequestDenied),
            JobError::Fatal(_)
        ));
    }

    #[test]
    fn timeouts_and_failed_connections_are_retryable_and_name_the_request() {
        assert_eq!(
            job_error(ErrorCode::ConnectionTimeout),
            JobError::retryable("POST http://hooks.test/in timed out connecting")
        );
        assert_eq!(
            job_error(ErrorCode::HttpResponseTimeout),
            JobError::retryable("POST http://hooks.test/in timed out waiting for the response")
        );
        assert_eq!(
            job_error(ErrorCode::ConnectionRefused),
            JobError::retryable("POST http://hooks.test/in was refused a connection")
        );
        for code in [
            ErrorCode::DnsTimeout,
            ErrorCode::DestinationNotFound,
            ErrorCode::ConnectionTerminated,
            ErrorCode::TlsCertificateError,
            ErrorCode::InternalError(Some("hyper broke".into())),
            ErrorCode::InternalError(None),
        ] {
            let debug = format!("{code:?}");
            assert!(matches!(job_error(code), JobError::Retryable(_)), "{debug}");
        }
    }

    #[test]
    fn a_dns_failure_says_what_the_resolver_answered() {
        let code = ErrorCode::DnsError(wasip2::http::types::DnsErrorPayload {
            rcode: Some("NXDOMAIN".to_owned()),
            info_code: None,
        });
        assert_eq!(
            job_error(code),
            JobError::retryable("POST http://hooks.test/in failed to resolve the host (NXDOMAIN)")
        );
    }

    #[test]
    fn a_response_larger_than_the_operator_allows_is_fatal_and_says_where_the_limit_is() {
        assert_eq!(
            job_error(ErrorCode::HttpResponseBodySize(Some(10_485_760))),
            JobError::fatal(
                "POST http://hooks.test/in got a response body larger than the operator \
                 allows (10485760 bytes): `max_response_bytes` in `jobhost.toml`"
            )
        );
    }

    #[test]
    fn a_body_cut_at_the_operators_limit_is_fatal_though_its_stream_error_has_no_code() {
        // What the host's body stream says when the body passes `max_response_bytes`.
        let code = uncoded("HTTP response body size exceeds limit: 1048576 bytes".to_owned());
        assert!(
            matches!(code, ErrorCode::HttpResponseBodySize(Some(1_048_576))),
            "{code:?}"
        );
        assert_eq!(
            job_error(code),
            JobError::fatal(
                "POST http://hooks.test/in got a response body larger than the operator \
                 allows (1048576 bytes): `max_response_bytes` in `jobhost.toml`"
            )
        );
        let other = uncoded("connection reset by peer".to_owned());
        assert!(matches!(job_error(other), JobError::Retryable(_)));
    }

    #[test]
    fn a_request_that_cannot_be_sent_is_fatal() {
        assert!(matches!(
            job_error(ErrorCode::HttpRequestUriInvalid),
            JobError::Fatal(_)
        ));
    }

    #[test]
    fn a_hosts_message_is_bounded_and_one_line() {
        let long = format!("outbound request to `{}\n", "h".repeat(5000));
        let error = HttpError::from_code(&ErrorCode::InternalError(Some(long)), LABEL);
        assert!(
            error.to_string().len() < 1100,
            "{}",
            error.to_string().len()
        );
        assert!(!error.to_string().contains('\n'));
    }
}
