"""The component side (`jobhost_sdk.guest`) natively, over the bindings componentize-py
generates for the repository's WIT: the host's imports are replaced by recorders, so the
shapes the component passes (dataclass fields, variant cases, `Err`) are checked here and
not only end to end (host/tests/cli/cli_python.rs)."""

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from jobhost_sdk import (
    Concurrency,
    Rate,
    Retry,
    Unique,
    build,
    deferred,
    fatal,
    job,
    plugin,
    queue,
    retryable,
)
from jobhost_sdk.config import ConfigError
from jobhost_sdk.http import HttpError, Request

WIT = Path(__file__).resolve().parents[2] / "wit"


@pytest.fixture(scope="module")
def bindings(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings")
    componentize = Path(sys.executable).with_name("componentize-py")
    subprocess.run(
        [componentize, *build.wit_options(WIT), "bindings", out], check=True, capture_output=True
    )
    sys.path.insert(0, str(out))
    from componentize_py_types import Err
    from wit_world.imports import host, types

    import jobhost_sdk.guest as guest

    yield guest, host, types, Err
    sys.path.remove(str(out))


@pytest.fixture
def calls(bindings, monkeypatch):
    _, host, _, Err = bindings
    recorded = []

    def enqueue(job_type, payload, delay):
        recorded.append(("enqueue", job_type, payload, delay))
        if job_type == "a.Refused":
            raise Err("unknown job type `a.Refused`")
        return "job-2"

    monkeypatch.setattr(host, "log", lambda *args: recorded.append(("log", *args)))
    monkeypatch.setattr(host, "report_panic", lambda *args: recorded.append(("panic", *args)))
    monkeypatch.setattr(host, "enqueue", enqueue)
    return recorded


def send(payload, ctx):
    if payload["to"] == "exit":
        raise SystemExit(3)
    if payload["to"] == "later":
        raise deferred("1500ms", "greylisted")
    if payload["to"] == "nobody":
        raise fatal("invalid address")
    ctx.info("sent", to=payload["to"])
    ctx.enqueue("a.Receipt", {"to": payload["to"]}, delay="250ms")
    if payload["to"] == "refused":
        ctx.enqueue("a.Refused", {})


WORK = queue("work", retry=Retry(max_attempts=4, base="1s", max="8s"), timeout="30s")
PLUGIN = plugin(
    name="p",
    queues=[WORK, queue("slow", queue_type="quorum", retry=Retry(backoff="fixed", delay="2s"))],
    jobs=[
        job("a.Send", queue=WORK, handler=send),
        job("a.Receipt", queue="slow", handler=lambda p, c: None),
    ],
)
LIMITED = plugin(
    name="limited",
    queues=[queue("work", concurrency=4, rate="50/s", burst=20), queue("slow")],
    jobs=[
        job(
            "a.Charge",
            queue="slow",
            handler=lambda p, c: None,
            concurrency=Concurrency(key="customer_id", limit=2),
            rate=Rate("10/m", key="customer_id", respect_retry_after=True),
            unique=Unique(key="order_id", for_="10m"),
        ),
        job(
            "a.Daily",
            queue="slow",
            handler=lambda p, c: None,
            cron="0 7 * * *",
            tz="Europe/Paris",
            payload={"kind": "daily"},
            catch_up=3,
        ),
        job("a.Tick", queue="slow", handler=lambda p, c: None, every="30s", rate=Rate("1/s")),
    ],
)


def delivery(types, job_type):
    return types.JobContext("id-1", job_type, "work", 1, 4, 0, 0, 5)


def payload(value):
    return json.dumps(value).encode()


def test_the_manifest_carries_the_declarations_in_the_wits_shapes(bindings):
    guest, _, types, _ = bindings
    manifest = guest.serve(PLUGIN)().manifest()
    assert manifest.queues[0].retry == types.RetryPolicy(
        4, types.Backoff_Exponential(types.ExponentialBackoff(1_000, 2.0, 8_000, True))
    )
    assert manifest.queues[1].retry == types.RetryPolicy(3, types.Backoff_Fixed(2_000))
    assert manifest.queues[0].timeout == 30_000
    assert (manifest.queues[0].queue_type, manifest.queues[1].queue_type) == (
        types.QueueType.CLASSIC,
        types.QueueType.QUORUM,
    )
    assert [
        (j.name, j.queue, j.retry, j.concurrency, j.rate, j.unique, j.schedule)
        for j in manifest.jobs
    ] == [
        ("a.Send", "work", None, None, None, None, None),
        ("a.Receipt", "slow", None, None, None, None, None),
    ]


def test_the_manifest_carries_the_limits_and_schedules_in_the_wits_shapes(bindings):
    guest, _, types, _ = bindings
    manifest = guest.serve(LIMITED)().manifest()
    work, slow = manifest.queues
    assert (work.concurrency, work.rate) == (4, types.RateLimit(50, types.RateUnit.SECOND, 20))
    assert (slow.concurrency, slow.rate) == (None, None)
    charge, daily, tick = manifest.jobs
    assert charge.concurrency == types.KeyConcurrency("customer_id", 2)
    assert charge.rate == types.KeyRate(
        "customer_id", types.RateLimit(10, types.RateUnit.MINUTE, 10), True
    )
    assert charge.unique == types.UniqueKey("order_id", 600_000)
    assert charge.schedule is None
    assert daily.schedule == types.JobSchedule(
        types.ScheduleTiming_Cron(types.CronSchedule("0 7 * * *", "Europe/Paris")),
        '{"kind": "daily"}',
        3,
    )
    assert tick.schedule == types.JobSchedule(types.ScheduleTiming_Every(30_000), "{}", 0)
    assert tick.rate == types.KeyRate(None, types.RateLimit(1, types.RateUnit.SECOND, 1), False)


def test_a_completed_job_logs_and_enqueues_through_the_hosts_imports(bindings, calls):
    guest, _, types, _ = bindings
    guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "a@b"}))
    assert calls == [
        ("log", types.Level.INFO, "sent", [("to", "a@b")]),
        ("enqueue", "a.Receipt", b'{"to": "a@b"}', 250),
    ]


def test_job_errors_cross_as_the_wits_variant_cases(bindings, calls):
    guest, _, types, Err = bindings
    handler = guest.serve(PLUGIN)()
    outcomes = {}
    for to in ["later", "nobody"]:
        with pytest.raises(Err) as raised:
            handler.handle(delivery(types, "a.Send"), payload({"to": to}))
        outcomes[to] = raised.value.value
    assert outcomes["later"] == types.JobError_Deferred(types.Deferral(1_500, "greylisted", False))
    assert outcomes["nobody"] == types.JobError_Fatal("invalid address")
    with pytest.raises(Err) as raised:
        handler.handle(delivery(types, "a.Send"), b"{not json")
    assert isinstance(raised.value.value, types.JobError_Decode)
    with pytest.raises(Err) as raised:
        handler.handle(delivery(types, "a.Other"), payload({}))
    assert raised.value.value == types.JobError_Fatal(
        "plugin has no handler for job type `a.Other` (it handles: a.Send, a.Receipt)"
    )


def test_a_follow_up_the_host_refuses_is_an_enqueue_error_the_handler_sees(bindings, calls):
    guest, _, types, Err = bindings
    with pytest.raises(Err) as raised:
        guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "refused"}))
    assert raised.value.value == types.JobError_Retryable(
        "uncaught EnqueueError: unknown job type `a.Refused`"
    )


def test_what_escapes_the_handler_as_a_base_exception_is_reported_before_the_trap(bindings, calls):
    guest, _, types, _ = bindings
    with pytest.raises(SystemExit):
        guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "exit"}))
    assert calls == [("panic", "uncaught SystemExit: 3")]


# `jobhost_sdk._wasi`: the host's `wasi:http` and `wasi:config` imports, faked over the same
# generated bindings.

LABEL = "POST http://hooks.test/in"


@pytest.fixture
def wasi(bindings):
    from wit_world.imports import http_types

    import jobhost_sdk._wasi as wasi

    return wasi, http_types


def test_a_request_the_operator_has_not_granted_is_fatal_with_the_hosts_message(wasi):
    wasi, t = wasi
    message = (
        "outbound request to `http://hooks.test` is not allowed for plugin `webhook`: add "
        '"http://hooks.test" to `allowed_outbound_hosts` of `[plugins.webhook]` in jobhost.toml'
    )
    error = wasi.from_code(t.ErrorCode_InternalError(message), LABEL)
    assert (error.kind, error.job_error()) == ("denied", fatal(message))
    assert wasi.from_code(t.ErrorCode_HttpRequestDenied(), LABEL).job_error().kind == "fatal"


def test_timeouts_and_failed_connections_are_retryable_and_name_the_request(wasi):
    wasi, t = wasi
    assert wasi.from_code(t.ErrorCode_ConnectionTimeout(), LABEL) == HttpError(
        "timeout", "POST http://hooks.test/in timed out connecting"
    )
    assert wasi.from_code(t.ErrorCode_ConnectionRefused(), LABEL).message == (
        "POST http://hooks.test/in was refused a connection"
    )
    for code in [
        t.ErrorCode_DnsTimeout(),
        t.ErrorCode_DestinationNotFound(),
        t.ErrorCode_ConnectionTerminated(),
        t.ErrorCode_TlsCertificateError(),
        t.ErrorCode_InternalError("hyper broke"),
        t.ErrorCode_InternalError(None),
    ]:
        assert wasi.from_code(code, LABEL).retryable, code


def test_a_dns_failure_says_what_the_resolver_answered(wasi):
    wasi, t = wasi
    code = t.ErrorCode_DnsError(t.DnsErrorPayload("NXDOMAIN", None))
    assert wasi.from_code(code, LABEL).job_error() == retryable(
        "POST http://hooks.test/in failed to resolve the host (NXDOMAIN)"
    )


def test_a_body_cut_at_the_operators_limit_is_fatal_though_its_stream_error_has_no_code(wasi):
    wasi, t = wasi
    code = wasi.uncoded("HTTP response body size exceeds limit: 1048576 bytes")
    assert code == t.ErrorCode_HttpResponseBodySize(1_048_576)
    assert wasi.from_code(code, LABEL).job_error() == fatal(
        "POST http://hooks.test/in got a response body larger than the operator allows "
        "(1048576 bytes): `max_response_bytes` in `jobhost.toml`"
    )
    assert wasi.from_code(wasi.uncoded("connection reset by peer"), LABEL).retryable


def test_a_hosts_message_is_bounded_and_one_line(wasi):
    wasi, t = wasi
    long = "outbound request to `" + "h" * 5000 + "\n"
    error = wasi.from_code(t.ErrorCode_InternalError(long), LABEL)
    assert len(error.message) < 1100 and "\n" not in error.message


def test_a_config_source_that_fails_is_a_retryable_config_error(bindings, monkeypatch):
    from componentize_py_types import Err
    from wit_world.imports import store

    import jobhost_sdk._wasi as wasi

    monkeypatch.setattr(store, "get", lambda key: {"endpoint": "https://e"}.get(key))
    assert (wasi.Host().config("endpoint"), wasi.Host().config("nope")) == ("https://e", None)

    def sealed(key):
        raise Err(store.Error_Upstream("vault is sealed"))

    monkeypatch.setattr(store, "get", sealed)
    with pytest.raises(ConfigError) as raised:
        wasi.Host().config("endpoint")
    assert raised.value.job_error() == retryable("the configuration source failed: vault is sealed")


class _Resource:
    """A fake resource: dropping it (`__exit__`) is recorded."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append(("drop", self.name))


@pytest.fixture
def fake_host(bindings, monkeypatch):
    """A fake `wasi:http`: records what the guest calls, in order, and answers with
    `answer["status"]`, `answer["headers"]` and `answer["chunks"]` (then the stream
    closes), or fails the response with `answer["error"]`."""
    from componentize_py_types import Err, Ok
    from wit_world.imports import http_types as t
    from wit_world.imports import outgoing_handler, streams

    log = []
    answer = {"status": 200, "headers": [("content-type", b"text/plain")], "chunks": [b"hel", b"lo"]}

    class Request(_Resource):
        def __init__(self, fields):
            super().__init__(log, "request")
            log.append(("headers", fields))

        def set_method(self, m):
            log.append(("method", type(m).__name__))

        def set_scheme(self, s):
            log.append(("scheme", type(s).__name__))

        def set_authority(self, a):
            log.append(("authority", a))

        def set_path_with_query(self, p):
            log.append(("path", p))

        def body(self):
            body = _Resource(log, "outgoing-body")
            out = _Resource(log, "output-stream")
            out.blocking_write_and_flush = lambda data: log.append(("write", bytes(data)))
            body.write = lambda: out
            return body

    def handle(request, options):
        log.append(("handle", None if options is None else "options"))
        future = _Resource(log, "future")
        pollable = _Resource(log, "pollable")
        pollable.block = lambda: log.append(("block",))
        future.subscribe = lambda: pollable
        if "error" in answer:
            future.get = lambda: Ok(Err(answer["error"]))
            return future
        response = _Resource(log, "response")
        response.status = lambda: answer["status"]
        fields = _Resource(log, "fields")
        fields.entries = lambda: answer["headers"]
        response.headers = lambda: fields
        body = _Resource(log, "incoming-body")
        stream = _Resource(log, "input-stream")
        chunks = list(answer["chunks"])

        def read(n):
            if not chunks:
                raise Err(streams.StreamError_Closed())
            chunk = chunks.pop(0)
            if isinstance(chunk, str):
                # The host's body stream failing with this message and no error code.
                failure = _Resource(log, "io-error")
                failure.to_debug_string = lambda: chunk
                raise Err(streams.StreamError_LastOperationFailed(failure))
            return chunk

        stream.blocking_read = read
        body.stream = lambda: stream
        response.consume = lambda: body
        future.get = lambda: Ok(Ok(response))
        return future

    def options():
        log.append(("options",))
        o = _Resource(log, "options")
        o.set_connect_timeout = lambda n: log.append(("connect-timeout", n))
        o.set_first_byte_timeout = lambda n: log.append(("first-byte-timeout", n))
        o.set_between_bytes_timeout = lambda n: log.append(("between-bytes-timeout", n))
        return o

    monkeypatch.setattr(t.Fields, "from_list", classmethod(lambda cls, entries: list(entries)))
    monkeypatch.setattr(t, "OutgoingRequest", Request)
    monkeypatch.setattr(t, "RequestOptions", options)
    monkeypatch.setattr(
        t.OutgoingBody, "finish", staticmethod(lambda body, trailers: log.append(("finish",)))
    )
    monkeypatch.setattr(
        t.IncomingBody,
        "finish",
        staticmethod(lambda body: (log.append(("trailers",)), _Resource(log, "trailers"))[1]),
    )
    monkeypatch.setattr(outgoing_handler, "handle", handle)
    monkeypatch.setattr(t, "http_error_code", lambda error: None)
    return log, answer


def test_a_request_is_handed_to_the_host_before_its_body_is_written_and_read_whole(fake_host):
    import jobhost_sdk._wasi as wasi

    log, _ = fake_host
    request = Request(
        "POST", "https://hooks.test:8443/in?x=1#f", [("x-sig", "00")], b"a" * 5000, timedelta(seconds=2)
    )
    response = wasi.send(request)
    assert (response.status, response.headers, response.body) == (
        200,
        [("content-type", "text/plain")],
        b"hello",
    )
    nanos = 2_000_000_000
    assert log == [
        ("headers", [("x-sig", b"00"), ("content-length", b"5000")]),
        ("method", "Method_Post"),
        ("scheme", "Scheme_Https"),
        ("authority", "hooks.test:8443"),
        ("path", "/in?x=1"),
        ("options",),
        ("connect-timeout", nanos),
        ("first-byte-timeout", nanos),
        ("between-bytes-timeout", nanos),
        ("handle", "options"),
        ("write", b"a" * 4096),
        ("write", b"a" * 904),
        ("drop", "output-stream"),
        ("finish",),
        ("block",),
        ("drop", "pollable"),
        ("drop", "fields"),
        ("drop", "input-stream"),
        ("trailers",),
        ("drop", "trailers"),
        ("drop", "response"),
        ("drop", "future"),
    ]


def test_a_response_that_failed_is_an_http_error_naming_the_request(fake_host):
    from wit_world.imports import http_types as t

    import jobhost_sdk._wasi as wasi

    log, answer = fake_host
    answer["error"] = t.ErrorCode_ConnectionRefused()
    with pytest.raises(HttpError) as raised:
        wasi.send(Request("GET", "http://hooks.test/in?key=s3cr3t"))
    assert raised.value == HttpError("connection", "GET http://hooks.test/in was refused a connection")
    assert ("write", b"") not in log, "a GET without a body writes nothing"
    assert log[-1] == ("drop", "future")


def test_a_url_that_cannot_be_sent_fails_before_the_host_sees_it(fake_host):
    import jobhost_sdk._wasi as wasi

    log, _ = fake_host
    with pytest.raises(HttpError) as raised:
        wasi.send(Request("GET", "ftp://files.test/x"))
    assert raised.value.kind == "invalid"
    assert log == []


def test_a_body_the_host_cuts_at_the_operators_limit_is_a_fatal_too_large(fake_host):
    import jobhost_sdk._wasi as wasi

    log, answer = fake_host
    answer["chunks"] = [b"x" * 10, "HTTP response body size exceeds limit: 10 bytes"]
    with pytest.raises(HttpError) as raised:
        wasi.send(Request("GET", "http://hooks.test/big"))
    assert raised.value.kind == "too_large"
    assert raised.value.job_error() == fatal(
        "GET http://hooks.test/big got a response body larger than the operator allows "
        "(10 bytes): `max_response_bytes` in `jobhost.toml`"
    )
    assert log[-5:] == [
        ("drop", "io-error"),
        ("drop", "input-stream"),
        ("drop", "incoming-body"),
        ("drop", "response"),
        ("drop", "future"),
    ], "each resource dropped before its parent"
