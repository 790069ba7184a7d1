"""Run a handler natively, under pytest, with a fake delivery (the Rust SDK's
`TestContext`). The handler meets the same `ctx` as in the component (same checks on log
levels, follow-up payloads and delays); what it logged, what it enqueued and how it ended
are recorded in the returned `Run`.

    run = TestContext(attempt=2).run(send_email, {"to": "a@b"})
    assert run.error == retryable("smtp server busy")
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

from ._context import Context, Delivery, Level
from ._declare import Handler
from ._errors import JobError
from ._run import call_handler

__all__ = ["FollowUp", "LogLine", "Run", "TestContext"]


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

    def run(self, handler: Handler, payload: object) -> Run:
        """Run `handler(payload, ctx)` once."""
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
        run.error = call_handler(handler, payload, Context(delivery, _Recorder(run)))
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

    def messages(self) -> list[str]:
        """The messages logged, in order."""
        return [line.message for line in self.logs]


@dataclass
class _Recorder:
    run: Run

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        self.run.logs.append(LogLine(level, message, fields))

    def enqueue(self, job_type: str, payload: bytes, delay_ms: int | None) -> str:
        follow_up = FollowUp(
            f"follow-up-{len(self.run.follow_ups) + 1}", job_type, json.loads(payload), delay_ms
        )
        self.run.follow_ups.append(follow_up)
        return follow_up.id
