"""The `ctx` a handler gets: the delivery's facts, `log` and `enqueue`. One implementation
for the component and for `jobhost_sdk.testing`; only the sink differs (the host's imports,
or a recorder), so a handler tested natively meets the same checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol

from ._duration import MAX_DELAY_MS, Duration, describe, format_ms, parse_duration

Level = Literal["trace", "debug", "info", "warn", "error"]
LEVELS: tuple[Level, ...] = ("trace", "debug", "info", "warn", "error")


class EnqueueError(Exception):
    """A follow-up the SDK or the host refused."""


@dataclass(frozen=True)
class Delivery:
    """The facts of one delivery (the WIT's `job-context`)."""

    job_id: str
    job_type: str
    queue: str
    attempt: int
    max_attempts: int
    deferrals: int
    priority: int
    age_ms: int


class Sink(Protocol):
    """Where a context's calls go: the host's imports, or the test helper's recorder."""

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None: ...

    def enqueue(self, job_type: str, payload: bytes, delay_ms: int | None) -> str: ...


class Context:
    """What a handler knows of its delivery and may ask of the host.

    `job_id` (the same across retries), `job_type`, `queue`, `attempt` (1-based),
    `max_attempts`, `deferrals`, `priority`, `age` (since the job was first enqueued).
    """

    def __init__(self, delivery: Delivery, sink: Sink) -> None:
        self._delivery = delivery
        self._sink = sink

    @property
    def job_id(self) -> str:
        return self._delivery.job_id

    @property
    def job_type(self) -> str:
        return self._delivery.job_type

    @property
    def queue(self) -> str:
        return self._delivery.queue

    @property
    def attempt(self) -> int:
        return self._delivery.attempt

    @property
    def max_attempts(self) -> int:
        return self._delivery.max_attempts

    @property
    def deferrals(self) -> int:
        return self._delivery.deferrals

    @property
    def priority(self) -> int:
        return self._delivery.priority

    @property
    def age(self) -> timedelta:
        return timedelta(milliseconds=self._delivery.age_ms)

    @property
    def is_last_attempt(self) -> bool:
        """Whether a retryable failure now dead-letters the job."""
        return self.attempt >= self.max_attempts

    def log(self, level: Level, message: str, /, **fields: object) -> None:
        """Log through the host, `fields` shown as strings (JSON for anything but a string).

        Raises `ValueError` for a level not in `LEVELS`."""
        if level not in LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {describe(level)}")
        self._sink.log(level, str(message), [(key, _field(value)) for key, value in fields.items()])

    def trace(self, message: str, /, **fields: object) -> None:
        self.log("trace", message, **fields)

    def debug(self, message: str, /, **fields: object) -> None:
        self.log("debug", message, **fields)

    def info(self, message: str, /, **fields: object) -> None:
        self.log("info", message, **fields)

    def warn(self, message: str, /, **fields: object) -> None:
        self.log("warn", message, **fields)

    def error(self, message: str, /, **fields: object) -> None:
        self.log("error", message, **fields)

    def enqueue(self, job_type: str, payload: object, *, delay: Duration | None = None) -> str:
        """Enqueue a follow-up job, published only if this handler succeeds; returns its id.

        Raises `EnqueueError` when the payload is not JSON, the delay is not a duration a hold
        queue can hold, or the host refused the job."""
        if not isinstance(job_type, str) or job_type == "":
            raise EnqueueError(
                f"a follow-up's job type must be a non-empty string, got {describe(job_type)}"
            )
        delay_ms = None
        if delay is not None:
            try:
                delay_ms = parse_duration(delay)
            except ValueError as error:
                raise EnqueueError(f"a follow-up's delay: {error}") from None
            if delay_ms > MAX_DELAY_MS:
                raise EnqueueError(
                    f"the follow-up's delay of {format_ms(delay_ms)} exceeds the longest hold of "
                    f"{format_ms(MAX_DELAY_MS)}"
                )
        try:
            # NaN and infinities are not JSON, whatever Python's default says.
            text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise EnqueueError(f"a follow-up's payload must be JSON: {error}") from None
        return self._sink.enqueue(job_type, text.encode(), delay_ms)


def _field(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
