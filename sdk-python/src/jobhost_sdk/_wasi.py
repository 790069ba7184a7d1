"""The component's backend for `jobhost_sdk.http` and `jobhost_sdk.config`: the host's
`wasi:http/outgoing-handler` and `wasi:config/store` imports, through the bindings
componentize-py generates for the world `jobhost_sdk.build` gives it (the `jobhost:plugin`
world plus those two imports; `jobhost_sdk/wit/` holds their WIT). Imported only in the
component and by the SDK's own tests over generated bindings.

One request blocks the job (a job is one synchronous call, and the host's timeouts bound
the wait), as the Rust SDK's `http::wasi` does, in the same order: the request is handed to
the host before its body is written, because the host streams the body to the server, and
a body larger than the pipe between them would otherwise never finish writing. The whole
response body is read: the host cuts it at the operator's `max_response_bytes`, and that
cut arrives as an error of kind `too_large`.

Each resource is dropped as soon as it is done with, children before their parents (a
stream before its body, a body before its response), as the WASI contract asks.
"""

from __future__ import annotations

from datetime import timedelta

from componentize_py_types import Err, Ok
from wit_world.imports import http_types, outgoing_handler, store, streams

from ._text import bounded
from ._url import split
from .config import ConfigError
from .http import HttpError, HttpErrorKind, Request, Response

WRITE_CHUNK = 4096
"""The most a `blocking-write-and-flush` takes at once (the WASI contract)."""

READ_CHUNK = 64 * 1024
"""How much one read asks for."""

NOT_GRANTED = "outbound request to `"
"""The start of the host's message for a request to an origin the operator has not
granted (the host's contract: an `internal-error` with this message)."""

BODY_TOO_LARGE = "HTTP response body size exceeds limit"
"""The start of the host's message for a body cut at `max_response_bytes`, followed by
`: N bytes`. A body stream's error carries no `error-code`, so this message is all that
tells a body too large from a broken connection."""

MESSAGE_BYTES = 1024
"""The most of a host's message an error keeps."""

_METHODS = {
    "GET": http_types.Method_Get,
    "HEAD": http_types.Method_Head,
    "POST": http_types.Method_Post,
    "PUT": http_types.Method_Put,
    "DELETE": http_types.Method_Delete,
    "OPTIONS": http_types.Method_Options,
    "PATCH": http_types.Method_Patch,
}


class Host:
    """The host's imports as the `_host.Backend` of a component's jobs."""

    def config(self, key: str) -> str | None:
        try:
            return store.get(key)
        except Err as failed:
            kind = "upstream" if isinstance(failed.value, store.Error_Upstream) else "io"
            raise ConfigError(kind, str(failed.value.value)) from None

    def send(self, request: Request) -> Response:
        return send(request)


def send(request: Request) -> Response:
    """Send `request` and read the whole response."""
    label = request.label

    def invalid(why: str) -> HttpError:
        return HttpError("invalid", f"{label} cannot be sent: {why}")

    def failed(code: object) -> HttpError:
        return from_code(code, label)

    try:
        target = split(request.url)
    except ValueError as why:
        raise invalid(str(why)) from None
    try:
        fields = http_types.Fields.from_list(request.wire_headers())
    except Err as refused:
        why = "is one the host sets itself" if isinstance(
            refused.value, http_types.HeaderError_Forbidden
        ) else "is malformed"
        names = ", ".join(name for name, _ in request.headers)
        raise invalid(f"one of its headers ({names}) {why}") from None
    outgoing = http_types.OutgoingRequest(fields)
    try:
        outgoing.set_method(_METHODS[request.method]())
        scheme = http_types.Scheme_Https() if target.https else http_types.Scheme_Http()
        outgoing.set_scheme(scheme)
        outgoing.set_authority(target.authority)
        outgoing.set_path_with_query(target.path_and_query)
        body = outgoing.body()
    except Err:
        outgoing.__exit__(None, None, None)
        raise invalid("the host refused its URL or method") from None
    try:
        future = outgoing_handler.handle(outgoing, _options(request))
    except Err as refused:
        body.__exit__(None, None, None)
        raise failed(refused.value) from None
    with future:
        try:
            _write_body(body, request.body)
        except Err as broken:
            body.__exit__(None, None, None)
            raise failed(broken.value) from None
        try:
            http_types.OutgoingBody.finish(body, None)
        except Err as broken:
            raise failed(broken.value) from None
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
        # `block` returned, so the response is ready, and it is taken only here.
        assert isinstance(answer, Ok), "a ready response is taken once"
        if isinstance(answer.value, Err):
            raise failed(answer.value.value)
        with answer.value.value as incoming:
            return _read_response(incoming, failed)


def _read_response(incoming: http_types.IncomingResponse, failed) -> Response:
    status = incoming.status()
    with incoming.headers() as fields:
        headers = [
            (name, value.decode("utf-8", errors="replace")) for name, value in fields.entries()
        ]
    try:
        body = incoming.consume()
    except Err:
        raise failed(http_types.ErrorCode_InternalError("the body was taken")) from None
    try:
        with body.stream() as stream:
            data = _read_all(stream)
    except Err as broken:
        body.__exit__(None, None, None)
        raise failed(broken.value) from None
    except _StreamFailed as broken:
        body.__exit__(None, None, None)
        raise failed(broken.code) from None
    # The trailers are not read: dropping their future is allowed.
    http_types.IncomingBody.finish(body).__exit__(None, None, None)
    return Response(status, headers, data)


class _StreamFailed(Exception):
    def __init__(self, code: object) -> None:
        self.code = code


def _read_all(stream: streams.InputStream) -> bytes:
    chunks = []
    while True:
        try:
            chunks.append(stream.blocking_read(READ_CHUNK))
        except Err as error:
            if isinstance(error.value, streams.StreamError_Closed):
                return b"".join(chunks)
            raise _StreamFailed(_stream_code(error.value)) from None


def _write_body(body: http_types.OutgoingBody, data: bytes) -> None:
    if not data:
        return
    with body.write() as stream:
        for start in range(0, len(data), WRITE_CHUNK):
            try:
                stream.blocking_write_and_flush(data[start : start + WRITE_CHUNK])
            except Err as error:
                raise Err(_stream_code(error.value)) from None


def _stream_code(error: object) -> object:
    """The HTTP failure behind a failed stream operation."""
    if isinstance(error, streams.StreamError_LastOperationFailed):
        with error.value as io_error:
            code = http_types.http_error_code(io_error)
            return code if code is not None else uncoded(io_error.to_debug_string())
    return http_types.ErrorCode_ConnectionTerminated()


def uncoded(message: str) -> object:
    """The failure behind a body stream error that carries no `error-code`: a body cut at
    the operator's limit (which no retry changes), else the host's message as an internal
    error."""
    first = message.splitlines()[0] if message else ""
    if first.startswith(BODY_TOO_LARGE):
        rest = first[len(BODY_TOO_LARGE) :]
        limit = None
        if rest.startswith(": ") and rest.endswith(" bytes") and rest[2:-6].isdigit():
            limit = int(rest[2:-6])
        return http_types.ErrorCode_HttpResponseBodySize(limit)
    return http_types.ErrorCode_InternalError(message)


def _options(request: Request) -> http_types.RequestOptions | None:
    """The request's timeout as `wasi:http` options; a host that does not take one keeps
    its own, which bounds every request anyway."""
    if request.timeout is None:
        return None
    nanos = min(request.timeout // timedelta(microseconds=1) * 1000, 2**64 - 1)
    options = http_types.RequestOptions()
    for setter in (
        options.set_connect_timeout,
        options.set_first_byte_timeout,
        options.set_between_bytes_timeout,
    ):
        try:
            setter(nanos)
        except Err:
            pass
    return options


_WHAT: dict[str, tuple[HttpErrorKind, str]] = {
    "HttpRequestDenied": ("denied", "was denied by the host"),
    "DnsTimeout": ("timeout", "timed out resolving the host"),
    "ConnectionTimeout": ("timeout", "timed out connecting"),
    "HttpResponseTimeout": ("timeout", "timed out waiting for the response"),
    "ConnectionReadTimeout": ("timeout", "timed out reading the response"),
    "ConnectionWriteTimeout": ("timeout", "timed out writing the request"),
    "ConnectionRefused": ("connection", "was refused a connection"),
    "ConnectionTerminated": ("connection", "lost its connection midway"),
    "HttpResponseIncomplete": ("connection", "lost its connection midway"),
    "DestinationNotFound": ("connection", "found no such host"),
    "DestinationUnavailable": ("connection", "could not reach the host"),
    "DestinationIpProhibited": ("connection", "could not reach the host"),
    "DestinationIpUnroutable": ("connection", "could not reach the host"),
    "ConnectionLimitReached": ("connection", "found the host's connections used up"),
    "TlsProtocolError": ("connection", "failed in TLS"),
    "TlsCertificateError": ("connection", "failed in TLS"),
    "TlsAlertReceived": ("connection", "failed in TLS"),
    "HttpProtocolError": ("connection", "got a malformed HTTP response"),
    "HttpResponseTransferCoding": ("connection", "got a malformed HTTP response"),
    "HttpResponseContentCoding": ("connection", "got a malformed HTTP response"),
    "HttpUpgradeFailed": ("connection", "got a malformed HTTP response"),
    "HttpResponseHeaderSectionSize": ("too_large", "got response headers too large"),
    "HttpResponseHeaderSize": ("too_large", "got response headers too large"),
    "HttpResponseTrailerSectionSize": ("too_large", "got response headers too large"),
    "HttpResponseTrailerSize": ("too_large", "got response headers too large"),
    "HttpRequestLengthRequired": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestBodySize": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestUriTooLong": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestHeaderSectionSize": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestHeaderSize": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestTrailerSectionSize": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestTrailerSize": ("invalid", "cannot be sent: it is too large"),
    "HttpRequestMethodInvalid": ("invalid", "cannot be sent: its method or URL is invalid"),
    "HttpRequestUriInvalid": ("invalid", "cannot be sent: its method or URL is invalid"),
    "LoopDetected": ("other", "ran into a proxy loop"),
    "ConfigurationError": ("other", "failed on the host's HTTP configuration"),
}


def from_code(code: object, label: str) -> HttpError:
    """The failure `wasi:http` reported for the request `label` (`GET http://host/path`), as
    the Rust SDK's `HttpError::from_code` words it."""
    case = type(code).__name__.removeprefix("ErrorCode_")
    value = getattr(code, "value", None)
    if case == "InternalError":
        message = value if isinstance(value, str) else None
        if message is not None and message.startswith(NOT_GRANTED):
            return HttpError("denied", bounded(message.encode(), MESSAGE_BYTES))
        detail = bounded((message or "no detail").encode(), MESSAGE_BYTES)
        return HttpError("other", f"{label} failed in the host: {detail}")
    if case == "DnsError":
        rcode = getattr(value, "rcode", None) or "no answer"
        return HttpError(
            "connection", f"{label} failed to resolve the host ({bounded(rcode.encode(), 64)})"
        )
    if case == "HttpResponseBodySize":
        limit = f" ({value} bytes)" if isinstance(value, int) else ""
        return HttpError(
            "too_large",
            f"{label} got a response body larger than the operator allows{limit}: "
            "`max_response_bytes` in `jobhost.toml`",
        )
    kind, what = _WHAT.get(case, ("other", f"failed in the host: {bounded(case.encode(), 64)}"))
    return HttpError(kind, f"{label} {what}")
