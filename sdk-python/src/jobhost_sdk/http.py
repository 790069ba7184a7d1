"""Outbound HTTP from a handler, through the host's `wasi:http`, to the origins the operator
granted this plugin (the Rust SDK's `jobhost_sdk::http`). A request blocks the job until
its whole response is read; the host's timeouts and size limits bound the wait and the
body.

    from jobhost_sdk import config, http

    def fetch_order(payload, ctx):
        base = config.require("api_base")
        response = http.get(f"{base}/orders/{payload['id']}", headers={"accept": "application/json"})
        response.job_result()        # 429 defers, 5xx retries, 4xx is fatal
        order = response.json()

`request(method, url, *, headers=, body=, json=, timeout=, follow_redirects=)` sends one
request (`get`, `post`, `put`, `patch`, `delete` and `head` name the method) and returns
its `Response` whatever the status; `HttpError` is a request that got no response.

What a response means for the job, `Response.job_result()` (which a handler may replace by
its own test of `status`): it returns for 2xx, and raises otherwise:

| response | raises |
|---|---|
| 429 or 503 with `Retry-After` (seconds or an HTTP date) | `retry_after(...)` for exactly that long, at most `MAX_DELAY` (the reason says when it was capped) |
| 429 or 503 without a usable `Retry-After` | `retryable(...)` |
| any other 5xx | `retryable(...)` |
| any other 4xx | `fatal(...)` |
| 3xx (a redirect not followed), 1xx | `fatal(...)` |

Every reason names the method and the URL (without its query, which often carries a key,
and without user information) and the status, and quotes at most 512 bytes of the body,
control characters escaped: a server's answer is untrusted text.

An `HttpError` a handler does not catch ends the job by its `kind`: a timeout, a failed
connection or another failure of the host is retryable; a request the operator has not
granted, a response larger than the operator allows and a request that cannot be sent as
written are fatal, because no retry changes them.

Redirects are followed only when `follow_redirects=N` says so, each a new request the host
checks against the grants again; to another origin only `CROSS_ORIGIN_HEADERS` go along,
and a body never does (a `307` or `308` that would carry one there is the response).

Natively, requests go to the responder of `TestContext(http=...)` and the run records each
of them in `run.requests`; there is no network in a native test.
"""

from __future__ import annotations

import calendar
import json as _json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from . import _host, _url
from ._duration import MAX_DELAY_MS, Duration, parse_duration
from ._errors import JobError, JobErrorSource, fatal, retryable
from ._text import bounded

__all__ = [
    "CROSS_ORIGIN_HEADERS",
    "EXCERPT_BYTES",
    "METHODS",
    "HttpError",
    "HttpErrorKind",
    "Request",
    "Response",
    "delete",
    "get",
    "head",
    "patch",
    "post",
    "put",
    "request",
]

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
"""The methods a request may have."""

CROSS_ORIGIN_HEADERS = ("accept", "accept-language", "user-agent")
"""The headers a followed redirect carries to another origin, when the request set them
(names compare ignoring case); every other header stays with the origin it was set for."""

EXCERPT_BYTES = 512
"""The most of a body a reason quotes, in bytes (before escapes and the closing note)."""

HttpErrorKind = Literal["denied", "timeout", "connection", "too_large", "invalid", "other"]
"""What kind of failure an `HttpError` is:

- `denied`: the operator has not granted this plugin the request's origin, or the host
  refused the request; the message is the host's, naming what to grant;
- `timeout`: no connection or no answer in time;
- `connection`: the connection could not be made or failed midway (refused, DNS, TLS,
  protocol);
- `too_large`: the response is larger than the operator allows (`max_response_bytes`);
- `invalid`: the request cannot be sent as written (its URL, method, a header, its size);
- `other`: the host failed otherwise.
"""

_KINDS = ("denied", "timeout", "connection", "too_large", "invalid", "other")
_RETRYABLE = frozenset({"timeout", "connection", "other"})

Headers = Mapping[str, str] | Iterable[tuple[str, str]]
"""Headers as a request or a test's response takes them: a mapping, or `(name, value)`
pairs (a name may repeat)."""


class HttpError(JobErrorSource):
    """A request that got no response. Uncaught, it ends the job as retryable or fatal by
    its `kind` (see `retryable`), with its message as the reason.

    A test's responder raises one to stand for a timeout, a refused connection, ...:
    `raise HttpError("timeout", "GET http://api.test/ timed out connecting")`.
    """

    def __init__(self, kind: HttpErrorKind, message: str) -> None:
        if kind not in _KINDS:
            raise ValueError(f"an HttpError's kind is one of {', '.join(_KINDS)}, got {kind!r}")
        super().__init__(message)
        self.kind: HttpErrorKind = kind
        self.message = message

    @property
    def retryable(self) -> bool:
        """Whether trying again may succeed: timeouts, failed connections and other host
        failures; not a denial, a response too large or a request that cannot be sent,
        which a retry repeats."""
        return self.kind in _RETRYABLE

    def job_error(self) -> JobError:
        return retryable(self.message) if self.retryable else fatal(self.message)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HttpError) and (self.kind, self.message) == (
            other.kind,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.message))

    def __repr__(self) -> str:
        return f"HttpError({self.kind!r}, {self.message!r})"


def _pairs(headers: Headers | None) -> list[tuple[str, str]]:
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs = []
    for name, value in items:
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"a header is a pair of strings, got {name!r}: {value!r}")
        pairs.append((name, value))
    return pairs


def _find(headers: list[tuple[str, str]], name: str) -> str | None:
    lower = name.lower()
    return next((value for key, value in headers if key.lower() == lower), None)


@dataclass(frozen=True)
class Request:
    """A request as sent: what a test's responder sees and `run.requests` records."""

    method: str
    url: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    timeout: timedelta | None = None

    def header(self, name: str) -> str | None:
        """The value of its first header `name` (case-insensitive)."""
        return _find(self.headers, name)

    def json(self) -> Any:
        """Its body decoded from JSON."""
        return _json.loads(self.body)

    @property
    def label(self) -> str:
        """`GET http://host/path`: the method and the URL without query, fragment or user
        information, bounded, as reasons and errors name the request."""
        return f"{self.method} {_url.redacted(self.url)}"

    def wire_headers(self) -> list[tuple[str, bytes]]:
        """The headers as they go on the wire: the request's, with the body's length as
        `content-length` (in place of one the request set) when it has a body or a method
        that carries one. Without it `wasi:http` sends the body chunked, which servers that
        require a length refuse."""
        headers = [
            (name, value.encode())
            for name, value in self.headers
            if name.lower() != "content-length"
        ]
        if self.method in ("POST", "PUT", "PATCH") or self.body:
            headers.append(("content-length", str(len(self.body)).encode()))
        return headers

    def _redirected(self, response: Response) -> Request | None:
        """The request `response` redirects to, if it is a redirect with a `Location`."""
        if response.status not in (301, 302, 303, 307, 308):
            return None
        location = response.header("location")
        if location is None:
            return None
        url = _url.resolve(self.url, location)
        if url is None:
            raise HttpError(
                "invalid",
                f"{self.label} redirected to `{_excerpt(location.encode())}`, which is no "
                "http(s) URL",
            )
        as_get = response.status == 303 or (
            response.status in (301, 302) and self.method == "POST"
        )
        same_origin = _url.origin(url) == _url.origin(self.url)
        if not same_origin and not as_get and self.body:
            # A body goes to the origin it was written for, never on to another one.
            return None
        headers = [
            (name, value)
            for name, value in self.headers
            if (same_origin or name.lower() in CROSS_ORIGIN_HEADERS)
            and not (as_get and name.lower() in ("content-type", "content-length"))
        ]
        return Request(
            method="GET" if as_get and self.method != "HEAD" else self.method,
            url=url,
            headers=headers,
            body=b"" if as_get else self.body,
            timeout=self.timeout,
        )


@dataclass(frozen=True)
class Response:
    """A response: its status, headers (in order; a value that is not UTF-8 is read
    lossily) and whole body. A test's responder builds one:
    `Response(503, headers={"Retry-After": "2"}, body="busy")`."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    # The label of the request it answers, for reasons; set when it is received.
    _label: str = field(default="", repr=False, compare=False)

    def __init__(
        self, status: int, headers: Headers | None = None, body: bytes | str = b"", _label: str = ""
    ) -> None:
        if isinstance(body, str):
            body = body.encode()
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", _pairs(headers))
        object.__setattr__(self, "body", bytes(body))
        object.__setattr__(self, "_label", _label)

    def header(self, name: str) -> str | None:
        """The value of the first header `name` (case-insensitive)."""
        return _find(self.headers, name)

    def text(self) -> str:
        """The body as UTF-8 text; `UnicodeDecodeError` when it is not."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body decoded from JSON; `ValueError` when it is not JSON."""
        return _json.loads(self.body)

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status <= 299

    def job_result(self) -> None:
        """Returns for a 2xx; else raises the `JobError` the table of the module doc calls
        for (a deferral, a retry or a dead letter)."""
        error = outcome(self, time.time())
        if error is not None:
            raise error


def request(
    method: str,
    url: str,
    *,
    headers: Headers | None = None,
    body: bytes | str | None = None,
    json: Any = ...,
    timeout: Duration | None = None,
    follow_redirects: int = 0,
) -> Response:
    """Send a request and read its whole response (as large as the operator allows).

    `body` is bytes, or text sent as UTF-8; `json` a value sent as a JSON body with
    `content-type: application/json` (not both). A body goes with its `Content-Length`, which
    replaces any the request set. `timeout` (`"5s"` or a `timedelta`) is the longest wait to
    connect, for the first byte of the response and between two of its bytes; the
    operator's `request_timeout` still bounds the whole request. `follow_redirects=N` follows
    at most N redirects (see the module doc).

    A response of any status is returned: `Response.job_result()` says what it means for the
    job. Raises `HttpError` for a request that got no response, or that cannot be sent as
    written (`invalid`, a fatal kind); `TypeError` or `ValueError` for arguments that are no
    request at all (a method not in `METHODS`, `body` and `json` both, a bad `timeout`).
    """
    name = method.upper() if isinstance(method, str) else method
    if name not in METHODS:
        raise ValueError(f"an HTTP method is one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(url, str):
        raise TypeError(f"a URL is a string, got {url!r}")
    pairs = _pairs(headers)
    data = b""
    if body is not None and json is not ...:
        raise TypeError("a request takes `body` or `json`, not both")
    if body is not None:
        data = body.encode() if isinstance(body, str) else bytes(body)
    wait = None if timeout is None else timedelta(milliseconds=parse_duration(timeout))
    sent = Request(name, url, pairs, data, wait)
    if json is not ...:
        try:
            # As the Rust SDK's serde_json writes it: compact, and NaN is not JSON.
            encoded = _json.dumps(json, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as cause:
            raise HttpError(
                "invalid", f"the JSON body of {sent.label} does not encode: {cause}"
            ) from None
        sent = replace(
            sent, headers=[*pairs, ("content-type", "application/json")], body=encoded.encode()
        )
    if not isinstance(follow_redirects, int) or follow_redirects < 0:
        raise ValueError(f"follow_redirects is a count of redirects, got {follow_redirects!r}")
    followed = 0
    while True:
        response = _transport(sent)
        response = Response(response.status, response.headers, response.body, _label=sent.label)
        if followed == follow_redirects:
            return response
        following = sent._redirected(response)
        if following is None:
            return response
        followed += 1
        sent = following


def get(url: str, **options: Any) -> Response:
    """A `GET` of `url`; `options` as `request` takes them."""
    return request("GET", url, **options)


def head(url: str, **options: Any) -> Response:
    """A `HEAD` of `url`."""
    return request("HEAD", url, **options)


def post(url: str, **options: Any) -> Response:
    """A `POST` to `url`."""
    return request("POST", url, **options)


def put(url: str, **options: Any) -> Response:
    """A `PUT` to `url`."""
    return request("PUT", url, **options)


def patch(url: str, **options: Any) -> Response:
    """A `PATCH` to `url`."""
    return request("PATCH", url, **options)


def delete(url: str, **options: Any) -> Response:
    """A `DELETE` of `url`."""
    return request("DELETE", url, **options)


def _transport(sent: Request) -> Response:
    backend = _host.current
    if backend is None:
        raise HttpError(
            "denied",
            f"`{sent.method} {sent.url}` was sent outside a job (or a `TestContext.run`), "
            "where no request is answered",
        )
    return backend.send(sent)


# What a response means for the job: pure, a status, headers, a body and the time.


def outcome(response: Response, now: float) -> JobError | None:
    """What `response` means for the job at `now` (seconds since the epoch, the clock an
    HTTP-date `Retry-After` is counted from): `None` for 2xx, else the `JobError`."""
    status = response.status
    answered = f"{response._label} answered {_status_line(status)}"
    if 200 <= status <= 299:
        return None
    if status in (429, 503):
        value = response.header("retry-after")
        asked = None if value is None else retry_after_ms(value, now)
        if asked is not None:
            return _deferral(asked, answered)
        return retryable(
            _with_body(f"{answered} without a usable Retry-After", response.body)
        )
    if 500 <= status <= 599:
        return retryable(_with_body(answered, response.body))
    if 400 <= status <= 499:
        return fatal(_with_body(answered, response.body))
    if 300 <= status <= 399:
        location = bounded((response.header("location") or "").encode(), 256)
        return fatal(
            f"{answered}, a redirect to `{location}` the request does not follow (see "
            "`follow_redirects`)"
        )
    return fatal(_with_body(f"{answered}, which is no final HTTP status", response.body))


_U64_MAX = 2**64 - 1


def _deferral(asked_ms: int, answered: str) -> JobError:
    """The deferral a server asked for, capped at the longest hold."""
    if asked_ms > MAX_DELAY_MS:
        return JobError(
            "deferred",
            f"{answered}, Retry-After {asked_ms // 1000}s, capped at the longest "
            f"hold of {_rust_duration(MAX_DELAY_MS)}",
            delay_ms=MAX_DELAY_MS,
            retry_after=True,
        )
    # Built directly: a zero wait (a date already past) is a deferral, which `retry_after`
    # (a duration an author writes, never zero) would refuse.
    return JobError(
        "deferred",
        f"{answered}, Retry-After {_rust_duration(asked_ms)}",
        delay_ms=asked_ms,
        retry_after=True,
    )


def _rust_duration(ms: int) -> str:
    """`ms` as the Rust SDK's reasons write a duration (`7s`, `1.5s`, `250ms`, `0ns`), so
    that a reason reads the same from either SDK."""
    if ms == 0:
        return "0ns"
    if ms < 1000:
        return f"{ms}ms"
    seconds, rest = divmod(ms, 1000)
    return f"{seconds}s" if rest == 0 else f"{seconds}.{rest:03d}".rstrip("0") + "s"


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH = "(" + "|".join(_MONTHS) + ")"
# The three forms of an HTTP date (RFC 9110 5.6.7), exactly as the Rust SDK's `httpdate`
# reads them.
_TIME = r"([0-9]{2}):([0-9]{2}):([0-9]{2})"
_WDAY = "(" + "|".join(_DAYS) + ")"
_IMF_FIXDATE = re.compile(_WDAY + r", ([0-9]{2}) " + _MONTH + r" ([0-9]{4}) " + _TIME + " GMT")
_RFC850 = re.compile(
    "(" + "|".join(_LONG_DAYS) + r"), ([0-9]{2})-" + _MONTH + r"-([0-9]{2}) " + _TIME + " GMT"
)
_ASCTIME = re.compile(_WDAY + " " + _MONTH + r" ([ 0-9][0-9]) " + _TIME + r" ([0-9]{4})")


def _http_date(value: str) -> int | None:
    """`value` as an HTTP date, in seconds since the epoch; `None` when it is none or names
    no real day (a wrong weekday, 31 February)."""
    if found := _IMF_FIXDATE.fullmatch(value):
        wday, day, mon, year, hour, minute, sec = found.groups()
        weekday = _DAYS.index(wday)
    elif found := _RFC850.fullmatch(value):
        wday, day, mon, short_year, hour, minute, sec = found.groups()
        weekday = _LONG_DAYS.index(wday)
        year = str(int(short_year) + (2000 if int(short_year) < 70 else 1900))
    elif found := _ASCTIME.fullmatch(value):
        wday, mon, day, hour, minute, sec, year = found.groups()
        weekday = _DAYS.index(wday)
        day = day.strip()
    else:
        return None
    fields = (int(year), _MONTHS.index(mon) + 1, int(day), int(hour), int(minute), int(sec))
    if not (1970 <= fields[0] <= 9999 and fields[3] < 24 and fields[4] < 60 and fields[5] < 60):
        return None
    if not 1 <= fields[2] <= calendar.monthrange(fields[0], fields[1])[1]:
        return None
    if calendar.weekday(fields[0], fields[1], fields[2]) != weekday:
        return None
    return calendar.timegm((*fields, 0, 0, 0))


def retry_after_ms(value: str, now: float) -> int | None:
    """The wait a `Retry-After` value asks for at `now`, in milliseconds: delta-seconds, or
    an HTTP date (a past date is no wait). `None` when it is neither."""
    value = value.strip()
    if value != "" and value.isascii() and value.isdigit():
        # Digits only, so a number beyond u64 (where the Rust SDK stops counting) is longer
        # than any hold anyway; not converted whole, since a server chooses its length.
        seconds = int(value) if len(value) <= 20 else _U64_MAX
        return min(seconds, _U64_MAX) * 1000
    date = _http_date(value)
    if date is None:
        return None
    return max(0, int((date - now) * 1000))


def _with_body(reason: str, body: bytes) -> str:
    """`reason`, then `: ` and an excerpt of `body` when it has one."""
    excerpt = _excerpt(body)
    return f"{reason}: {excerpt}" if excerpt else reason


def _excerpt(body: bytes) -> str:
    """At most `EXCERPT_BYTES` of `body`, trimmed, read lossily as UTF-8, control characters
    escaped, and saying how long the whole was when it is cut."""
    trimmed = body.strip(b" \t\n\r\x0c")
    shown = bounded(trimmed, EXCERPT_BYTES)
    if len(trimmed) > EXCERPT_BYTES:
        return f"{shown} ({len(body)} bytes in all)"
    return shown


_PHRASES = {
    300: "Multiple Choices",
    301: "Moved Permanently",
    302: "Found",
    303: "See Other",
    304: "Not Modified",
    307: "Temporary Redirect",
    308: "Permanent Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    410: "Gone",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def _status_line(status: int) -> str:
    """`429 Too Many Requests`: the status and its reason phrase, when it has a common one."""
    phrase = _PHRASES.get(status)
    return f"{status} {phrase}" if phrase else str(status)
