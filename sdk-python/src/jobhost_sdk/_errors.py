"""How a handler says a job did not complete: it raises a `JobError` (the Rust SDK's
`JobError` kinds), built by `retryable`, `fatal`, `deferred` or `retry_after`. Any other
exception is a bug of the moment, treated as retryable (see `outcome_of`), so a job is not
lost to a transient `KeyError`.
"""

from __future__ import annotations

from typing import Literal

from ._duration import MAX_DELAY_MS, Duration, describe, format_ms, parse_duration

Kind = Literal["retryable", "fatal", "deferred", "decode"]


class JobError(Exception):
    """Why a job did not complete. Raise one built by `retryable`, `fatal`, `deferred` or
    `retry_after`; two are equal when their kind, message and deferral are.

    `kind` is one of the WIT's `job-error` cases; `delay_ms` and `retry_after` are set for a
    deferral only (`delay_ms` is `None` otherwise).
    """

    def __init__(
        self, kind: Kind, message: str, *, delay_ms: int | None = None, retry_after: bool = False
    ) -> None:
        super().__init__(message)
        self.kind: Kind = kind
        self.message = message
        self.delay_ms = delay_ms
        self.retry_after = retry_after

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.message, self.delay_ms, self.retry_after)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobError) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.kind == "deferred":
            function = "retry_after" if self.retry_after else "deferred"
            return f"{function}({format_ms(self.delay_ms or 0)!r}, {self.message!r})"
        return f"{self.kind}({self.message!r})"


def retryable(message: str) -> JobError:
    """Transient: the effective retry policy decides what happens next."""
    return JobError("retryable", _text(message))


def fatal(message: str) -> JobError:
    """Permanent: the job is dead-lettered without another attempt."""
    return JobError("fatal", _text(message))


def deferred(delay: Duration, reason: str = "") -> JobError:
    """Run the job again after `delay` (`"30s"` or a `timedelta`) without spending an attempt.

    A delay longer than a hold queue can hold (`MAX_DELAY`) is a fatal error saying so, as in
    the Rust SDK; so is a delay that is not a duration.
    """
    return _deferral(delay, reason, retry_after=False)


def retry_after(delay: Duration, reason: str = "") -> JobError:
    """A deferral for as long as a called service asked (an HTTP `Retry-After`): a job type
    whose key rate respects it holds the key's other jobs back as long."""
    return _deferral(delay, reason, retry_after=True)


def _deferral(delay: Duration, reason: str, *, retry_after: bool) -> JobError:
    try:
        ms = parse_duration(delay)
    except ValueError as error:
        return fatal(f"a deferral needs a duration: {error} ({_text(reason)})")
    if ms > MAX_DELAY_MS:
        return fatal(
            f"the deferral of {format_ms(ms)} exceeds the longest hold of "
            f"{format_ms(MAX_DELAY_MS)} ({_text(reason)})"
        )
    return JobError("deferred", _text(reason), delay_ms=ms, retry_after=retry_after)


class JobErrorSource(Exception):
    """An SDK exception that says itself what it means for the job when a handler lets it
    escape (an `HttpError` by its kind, a `ConfigError` as retryable), as `?` converts one in
    the Rust SDK."""

    def job_error(self) -> JobError:
        raise NotImplementedError


def outcome_of(raised: BaseException) -> JobError:
    """What a handler's exception means: a `JobError` as it is, an SDK error
    (`JobErrorSource`) as it says, anything else retryable with its type and message
    (`uncaught KeyError: 'to'`)."""
    if isinstance(raised, JobError):
        return raised
    if isinstance(raised, JobErrorSource):
        return raised.job_error()
    return retryable(f"uncaught {type(raised).__name__}: {raised}")


def _text(message: object) -> str:
    return message if isinstance(message, str) else describe(message)
