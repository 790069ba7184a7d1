"""Run a handler natively, under pytest, with a fake delivery (the Rust SDK's
`TestContext`). The handler meets the same `ctx` as in the component (same checks on log
levels, follow-up payloads and delays); what it logged, what it enqueued, the HTTP requests
it sent and how it ended are recorded in the returned `Run`.

    run = TestContext(attempt=2).run(send_email, {"to": "a@b"})
    assert run.error == retryable("smtp server busy")

`config` stands for the operator's config values and secrets (`jobhost_sdk.config`), and
`http` for the servers the handler calls (`jobhost_sdk.http`): a function from the `Request`
to the `Response`, which raises an `HttpError` to stand for a request that got no response.
Without one, every request fails as one the operator has not granted, as on a host without
grants.

    def relay(request):
        return Response(503, headers={"Retry-After": "2"}, body="busy")

    run = TestContext(config={"relay_url": "http://relay.test"}, http=relay).run(send, email)
    assert run.error == retry_after("2s", "POST http://relay.test/send answered 503 ...")
    assert run.requests[0].json() == {"to": "a@b"}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from . import _host
from ._context import Context, Delivery, Level
from ._declare import Handler
from ._errors import JobError
from ._run import call_handler
from .http import HttpError, Request, Response

__all__ = ["FollowUp", "HttpError", "LogLine", "Request", "Response", "Run", "TestContext"]

Responder = Callable[[Request], Response]
"""A test's stand-in for the servers a handler calls."""


@dataclass
class TestContext:
    """A delivery to run a handler against; `max_attempts` defaults to `attempt`, so a
    context of `attempt=3` is the last attempt unless told otherwise."""

    # Not a test class, whatever its name tells pytest.
    __test__ = False

    job_id: str = "00000000-0000-4000-8000-000000000000"
    job_type: str = "test.Job"
    queue: str = "test"
    attempt: int = 1
    max_attempts: int | None = None
    deferrals: int = 0
    priority: int = 0
    age: timedelta = timedelta(0)
    config: Mapping[str, str] = field(default_factory=dict)
    """The config values and secrets the operator gives the plugin; a key not here is
    `None` to `config.get`."""
    http: Responder | None = None
    """Answers each request the handler sends; `None` fails them as not granted."""

    def run(self, handler: Handler, payload: object) -> Run:
        """Run `handler(payload, ctx)` once, its HTTP requests and config reads answered by
        this context."""
        run = Run()
        delivery = Delivery(
            job_id=self.job_id,
            job_type=self.job_type,
            queue=self.queue,
            attempt=self.attempt,
            max_attempts=max(self.attempt, self.max_attempts or 0),
            deferrals=self.deferrals,
            priority=self.priority,
            age_ms=self.age // timedelta(milliseconds=1),
        )
        recorder = _Recorder(run, dict(self.config), self.http)
        previous = _host.install(recorder)
        try:
            run.error = call_handler(handler, payload, Context(delivery, recorder))
        finally:
            _host.install(previous)
        return run


@dataclass(frozen=True)
class LogLine:
    """One `ctx.log` call, its fields as the host receives them (strings)."""

    level: Level
    message: str
    fields: list[tuple[str, str]]

    def field(self, key: str) -> str | None:
        """The value of the field `key`, or `None`."""
        return next((value for name, value in self.fields if name == key), None)


@dataclass(frozen=True)
class FollowUp:
    """One `ctx.enqueue` call: its id (`follow-up-1`, ...), job type, payload as the host
    would read it, and delay."""

    id: str
    job_type: str
    payload: object
    delay_ms: int | None


@dataclass
class Run:
    """What one run of a handler did: `error` is `None` when the job completed."""

    error: JobError | None = None
    logs: list[LogLine] = field(default_factory=list)
    follow_ups: list[FollowUp] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    """Every HTTP request sent, in order, each redirect followed as a request of its own."""

    def messages(self) -> list[str]:
        """The messages logged, in order."""
        return [line.message for line in self.logs]


@dataclass
class _Recorder:
    """The host a test run stands on: it records, and answers as the context says."""

    run: Run
    values: dict[str, str]
    responder: Responder | None

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        self.run.logs.append(LogLine(level, message, fields))

    def enqueue(self, job_type: str, payload: bytes, delay_ms: int | None) -> str:
        follow_up = FollowUp(
            f"follow-up-{len(self.run.follow_ups) + 1}", job_type, json.loads(payload), delay_ms
        )
        self.run.follow_ups.append(follow_up)
        return follow_up.id

    def config(self, key: str) -> str | None:
        return self.values.get(key)

    def send(self, request: Request) -> Response:
        self.run.requests.append(request)
        if self.responder is None:
            raise HttpError(
                "denied",
                f"`{request.method} {request.url}` was sent, and this test answers no request: "
                "give the TestContext a responder with `http=`",
            )
        response = self.responder(request)
        if not isinstance(response, Response):
            raise TypeError(f"a test's responder returns a Response, got {response!r}")
        return response
