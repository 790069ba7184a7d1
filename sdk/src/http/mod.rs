//! Outbound HTTP from a handler, through `wasi:http`, to the origins the operator granted
//! this plugin (feature `http`).
//!
//! ```no_run
//! use jobhost_sdk::prelude::*;
//! use jobhost_sdk::http;
//!
//! fn fetch_order(id: u64) -> Result<serde_json::Value, JobError> {
//!     let base = jobhost_sdk::config::require("api_base")?;
//!     let response = http::get(format!("{base}/orders/{id}"))
//!         .header("accept", "application/json")
//!         .send()?;          // a transport failure is a JobError by its kind
//!     response.job_result()?; // 429 defers, 5xx retries, 4xx is fatal
//!     Ok(response.json().fatal()?)
//! }
//! ```
//!
//! # What a response means for the job
//!
//! [`Response::job_result`] is the usual mapping, which a handler may replace with its own
//! `match` on [`Response::status`]:
//!
//! | response | `job_result()` |
//! |---|---|
//! | 2xx | `Ok(())` |
//! | 429 or 503 with `Retry-After` (seconds or an HTTP date) | [`JobError::Deferred`](crate::JobError::Deferred) for exactly that long, at most [`MAX_DELAY`](crate::MAX_DELAY) (the reason says when it was capped) |
//! | 429 or 503 without a usable `Retry-After` | retryable |
//! | any other 5xx | retryable |
//! | any other 4xx | fatal |
//! | 3xx (a redirect not followed), 1xx | fatal |
//!
//! Every reason names the method and the URL (without its query, which often carries a
//! key, and without user information) and the status, and quotes at most 512 bytes of
//! the body with control characters escaped.
//!
//! [`send`](RequestBuilder::send) fails with an [`HttpError`], which `?` turns into a
//! [`JobError`](crate::JobError) by its [`HttpErrorKind`]: a timeout or a failed
//! connection is retryable; a request the operator has not granted, a response larger
//! than the operator allows and a request that cannot be sent as written are fatal,
//! because no retry changes them.
//!
//! # Redirects
//!
//! None are followed unless the request says [`follow_redirects`](RequestBuilder::follow_redirects).
//! Each redirect is a new request, which the host checks against the operator's grants
//! again. Within the origin (same scheme, host and port) it carries every header the
//! request set. To another origin:
//! - only the headers of a safe list go along: `Accept`, `Accept-Language` and
//!   `User-Agent` ([`CROSS_ORIGIN_HEADERS`]); every other header the request set
//!   (`Authorization`, `Cookie`, `X-Api-Key`, signatures, ...) is dropped, because the
//!   SDK cannot tell a credential from any other header;
//! - no body goes along: a `307` or `308` to another origin, which would resend the body,
//!   is not followed, and the redirect is the response, which
//!   [`job_result`](Response::job_result) makes fatal like any redirect not followed. A
//!   handler that means to send its body there sends a new request to the `Location`.
//!
//! # Tests
//!
//! Natively, requests go to the responder of
//! [`TestContext::respond_with`](crate::testing::TestContext::respond_with), and the run
//! records each of them; there is no network in a native test.

mod error;
mod outcome;
mod url;
#[cfg(target_arch = "wasm32")]
mod wasi;

use std::fmt;
use std::time::Duration;

pub use error::{HttpError, HttpErrorKind};

/// The headers a followed redirect carries to another origin, when the request set them
/// (names compare ignoring case); every other header stays with the origin it was set for.
pub const CROSS_ORIGIN_HEADERS: &[&str] = &["accept", "accept-language", "user-agent"];

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `PATCH`
    Patch,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
            Self::Options => "OPTIONS",
            Self::Patch => "PATCH",
        })
    }
}

/// A `GET` of `url`.
pub fn get(url: impl Into<String>) -> RequestBuilder {
    request(Method::Get, url)
}

/// A `POST` to `url`.
pub fn post(url: impl Into<String>) -> RequestBuilder {
    request(Method::Post, url)
}

/// A `PUT` to `url`.
pub fn put(url: impl Into<String>) -> RequestBuilder {
    request(Method::Put, url)
}

/// A `DELETE` of `url`.
pub fn delete(url: impl Into<String>) -> RequestBuilder {
    request(Method::Delete, url)
}

/// A request with `method` to `url` (`http://` or `https://`).
pub fn request(method: Method, url: impl Into<String>) -> RequestBuilder {
    RequestBuilder {
        request: Request {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        },
        redirects: 0,
        error: None,
    }
}

/// A request being written; [`send`](Self::send) sends it. Defaults: no headers, an empty
/// body, the host's timeout, no redirects followed.
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder {
    request: Request,
    redirects: u32,
    /// A mistake found while building, reported by `send`.
    error: Option<HttpError>,
}

impl RequestBuilder {
    /// Adds the header `name: value` (a name may repeat).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.headers.push((name.into(), value.into()));
        self
    }

    /// The request body. It is sent with its `Content-Length` (not chunked), which replaces
    /// any `content-length` header the request set.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.request.body = body.into();
        self
    }

    /// `value` as a JSON body, with `content-type: application/json`.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => self.header("content-type", "application/json").body(body),
            Err(cause) => {
                self.error = Some(HttpError::new(
                    HttpErrorKind::Invalid,
                    format!(
                        "the JSON body of {} does not encode: {cause}",
                        self.request.label()
                    ),
                ));
                self
            }
        }
    }

    /// The longest wait to connect, for the first byte of the response and between two of
    /// its bytes; the operator's `request_timeout` still bounds the whole request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.request.timeout = Some(timeout);
        self
    }

    /// Follows at most `max` redirects (`301`, `302`, `303`, `307`, `308` with a
    /// `Location`), each a new request checked against the operator's grants; `303`, and
    /// `301` or `302` after a `POST`, continue as a body-less `GET`. A redirect beyond
    /// `max` is the response, and so is a `307` or `308` that would carry a body to another
    /// origin; to another origin only [`CROSS_ORIGIN_HEADERS`] go along (see the
    /// [module doc](self#redirects)).
    pub fn follow_redirects(mut self, max: u32) -> Self {
        self.redirects = max;
        self
    }

    /// Sends the request and reads the whole response (as large as the operator allows).
    ///
    /// A response of any status is `Ok`: [`Response::job_result`] says what it means for
    /// the job. `Err` is a request that got no response.
    pub fn send(self) -> Result<Response, HttpError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let mut request = self.request;
        let mut followed = 0;
        loop {
            let response = transport(&request)?.answering(&request);
            if followed == self.redirects {
                return Ok(response);
            }
            let Some(next) = request.redirected(&response)? else {
                return Ok(response);
            };
            followed += 1;
            request = next;
        }
    }
}

/// A request as sent: what a test's responder sees and a test run records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

impl Request {
    /// Its method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Its URL, as written.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The value of its first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }

    /// Every header, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// Its body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Its timeout, if it set one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The headers as they go on the wire: the request's, with the body's length as
    /// `content-length` (in place of one the request set) when it has a body or a method
    /// that carries one. Without it `wasi:http` sends the body chunked, which servers that
    /// require a length (presigned S3 `PUT`s, many API gateways) refuse with `411` or a
    /// dropped connection.
    #[cfg(any(target_arch = "wasm32", test))]
    fn wire_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length"))
            .map(|(name, value)| (name.clone(), value.as_bytes().to_vec()))
            .collect();
        let carries_body = matches!(self.method, Method::Post | Method::Put | Method::Patch);
        if carries_body || !self.body.is_empty() {
            headers.push((
                "content-length".to_owned(),
                self.body.len().to_string().into_bytes(),
            ));
        }
        headers
    }

    /// `GET http://host/path`: the method and the URL without query, fragment or user
    /// information, bounded, as reasons and errors name the request.
    fn label(&self) -> String {
        format!("{} {}", self.method, url::redacted(&self.url))
    }

    /// The request `response` redirects to, if it is a redirect with a `Location`.
    fn redirected(&self, response: &Response) -> Result<Option<Request>, HttpError> {
        let status = response.status();
        if !matches!(status, 301 | 302 | 303 | 307 | 308) {
            return Ok(None);
        }
        let Some(location) = response.header("location") else {
            return Ok(None);
        };
        let url = url::resolve(&self.url, location).ok_or_else(|| {
            HttpError::new(
                HttpErrorKind::Invalid,
                format!(
                    "{} redirected to `{}`, which is no http(s) URL",
                    self.label(),
                    outcome::excerpt(location.as_bytes())
                ),
            )
        })?;
        let as_get = status == 303 || (matches!(status, 301 | 302) && self.method == Method::Post);
        let same_origin = url::origin(&url) == url::origin(&self.url);
        if !same_origin && !as_get && !self.body.is_empty() {
            // A body goes to the origin it was written for, never on to another one.
            return Ok(None);
        }
        let is = |name: &str, names: &[&str]| names.iter().any(|n| name.eq_ignore_ascii_case(n));
        let headers = self
            .headers
            .iter()
            .filter(|(name, _)| {
                let about_body = is(name, &["content-type", "content-length"]);
                let kept = same_origin || is(name, CROSS_ORIGIN_HEADERS);
                kept && !(about_body && as_get)
            })
            .cloned()
            .collect();
        Ok(Some(Request {
            method: if as_get && self.method != Method::Head {
                Method::Get
            } else {
                self.method
            },
            url,
            headers,
            body: if as_get {
                Vec::new()
            } else {
                self.body.clone()
            },
            timeout: self.timeout,
        }))
    }
}

/// A response: its status, headers and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The request's label, set by `send`, for reasons.
    label: String,
}

impl Response {
    /// A response with `status`, no headers and no body, as a test's responder answers.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            label: String::new(),
        }
    }

    /// This response with the header `name: value` added.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// This response with `body`.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The value of the first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }

    /// Every header, in order; a value that is not UTF-8 is read lossily.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.body)
    }

    /// The body decoded from JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// What this response means for the job, by the table of the [module doc](self):
    /// `Ok` for 2xx, else the deferral, retry or dead letter it calls for.
    pub fn job_result(&self) -> Result<(), crate::JobError> {
        outcome::job_result(self, std::time::SystemTime::now())
    }

    /// This response, as the answer to `request`.
    fn answering(mut self, request: &Request) -> Self {
        self.label = request.label();
        self
    }
}

fn find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// Sends one request: through the host's `wasi:http` in a component, to the test's
/// responder natively.
fn transport(request: &Request) -> Result<Response, HttpError> {
    #[cfg(target_arch = "wasm32")]
    {
        wasi::send(request)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::respond(request)
    }
}

#[cfg(test)]
mod tests;
