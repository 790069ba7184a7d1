"""Declaring a plugin: its queues, its job types and their handlers, checked as they are
declared. `jobhost build` imports the plugin natively before it builds the component, so a
declaration these rules refuse fails the build with every problem listed; the host checks
the manifest again at load (it trusts no plugin), with its own rules.

Keys, defaults and messages follow the Rust derives (docs/plugin-authors.md "Queues and
jobs" and "Retries and backoff") and sdk-js, in Python's spelling: keyword arguments in
snake_case, a policy as `Retry(...)`; the fleet-wide limits are read by `_limits`, a job's
schedule by `_schedule`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._checks import duration, integer, optional_duration
from ._duration import MAX_DELAY_MS, Duration, describe, format_ms
from ._limits import (
    Concurrency,
    KeyCap,
    KeyRate,
    Rate,
    RateLimit,
    Unique,
    UniqueKey,
    key_cap,
    key_rate,
    queue_concurrency,
    queue_rate,
    unique_key,
)
from ._schedule import Schedule, schedule

if TYPE_CHECKING:
    from ._context import Context

Handler = Callable[[Any, "Context"], None]
"""A job handler: `handler(payload, ctx)`, completing by returning and failing by raising."""

QueueType = Literal["classic", "quorum"]
BackoffKind = Literal["none", "fixed", "exponential"]

_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")
_CONTROL_OR_SPACE = re.compile(r"[\u0000-\u001f\u007f-\u009f\s]")
# Which backoff each backoff-specific key belongs to.
_OWNER = {
    "delay": "fixed",
    "base": "exponential",
    "factor": "exponential",
    "max": "exponential",
    "jitter": "exponential",
}
_DEFAULT_ATTEMPTS = 3
_DEFAULT_BASE_MS = 1_000
_DEFAULT_FACTOR = 2.0
_DEFAULT_MAX_MS = 300_000
_U32 = 2**32 - 1
_T = TypeVar("_T")


class DeclarationError(ValueError):
    """Every problem of one declaration, listed in one error; `problems` holds them."""

    def __init__(self, owner: str, problems: list[str]) -> None:
        listing = (
            f" {problems[0]}" if len(problems) == 1 else "".join(f"\n  - {p}" for p in problems)
        )
        super().__init__(f"{owner}:{listing}")
        self.problems = problems


@dataclass(frozen=True)
class Retry:
    """A retry policy as written, in the grammar of docs/plugin-authors.md: `Retry()` is every
    default (three attempts, exponential from 1s by a factor 2.0 up to 5m, with jitter).
    `queue(...)` and `job(...)` check it; a key left `None` takes its default."""

    max_attempts: int | None = None
    backoff: BackoffKind | None = None
    delay: Duration | None = None
    base: Duration | None = None
    factor: float | None = None
    max: Duration | None = None
    jitter: bool | None = None


@dataclass(frozen=True)
class NoBackoff:
    """Retry at once."""


@dataclass(frozen=True)
class FixedBackoff:
    """The same wait before every retry."""

    delay_ms: int


@dataclass(frozen=True)
class ExponentialBackoff:
    """`min(max, base * factor^(failed-attempt - 1))`, drawn from `[0, computed]` with jitter."""

    base_ms: int
    factor: float
    max_ms: int
    jitter: bool


@dataclass(frozen=True)
class RetryPolicy:
    """A checked policy, with every default filled in."""

    max_attempts: int
    backoff: NoBackoff | FixedBackoff | ExponentialBackoff


@dataclass(frozen=True)
class Queue:
    """A queue of the plugin, as `queue(...)` checked it."""

    name: str
    prefetch: int
    durable: bool
    queue_type: QueueType
    max_priority: int
    message_ttl_ms: int | None
    timeout_ms: int | None
    retry: RetryPolicy | None
    concurrency: int | None
    rate: RateLimit | None


@dataclass(frozen=True)
class Job:
    """A job type of the plugin and its handler, as `job(...)` checked it."""

    name: str
    queue: str
    handler: Handler
    retry: RetryPolicy | None
    timeout_ms: int | None
    decode: Callable[[Any], Any] | None
    concurrency: KeyCap | None
    rate: KeyRate | None
    unique: UniqueKey | None
    schedule: Schedule | None


@dataclass(frozen=True)
class Plugin:
    """What the plugin's module binds to `PLUGIN`: its name, queues and jobs."""

    name: str
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]
    _routes: dict[str, Job] = field(repr=False, compare=False)

    def route(self, job_type: str) -> Job | None:
        """The job type's declaration, if the plugin handles it."""
        return self._routes.get(job_type)


def queue(
    name: str,
    *,
    prefetch: int = 16,
    durable: bool | None = None,
    queue_type: QueueType = "classic",
    max_priority: int = 10,
    message_ttl: Duration | None = None,
    timeout: Duration | None = None,
    retry: Retry | None = None,
    concurrency: int | None = None,
    rate: str | None = None,
    burst: int | None = None,
) -> Queue:
    """A queue the plugin consumes, by its broker name.

    `prefetch` 1..=65535, `durable` (default true; a quorum queue always is), `queue_type`
    "classic" or "quorum", `max_priority` 0..=255, `message_ttl` and `timeout` durations,
    `retry` the policy of its jobs that have none (none means one attempt, no retries);
    fleet-wide, `concurrency` (1..=1000 jobs at once) and `rate` ("50/s", "10/m", "1000/h";
    at most 1000 a second) with `burst` (1..=10000, default the count).
    Raises `DeclarationError` listing every problem.
    """
    problems: list[str] = []
    _check_name(name, _queue_name_rule, problems)
    integer("prefetch", prefetch, 1, 65_535, problems)
    if durable is not None and not isinstance(durable, bool):
        problems.append(f"`durable` must be True or False, got {describe(durable)}")
    if queue_type not in ("classic", "quorum"):
        problems.append(f'`queue_type` must be "classic" or "quorum", got {describe(queue_type)}')
    elif queue_type == "quorum" and durable is False:
        problems.append(
            '`durable=False` does not apply to `queue_type="quorum"`: a quorum queue is always '
            'durable; remove `durable=False`, or write `queue_type="classic"`'
        )
    integer("max_priority", max_priority, 0, 255, problems)
    declared = Queue(
        name=name,
        prefetch=prefetch,
        durable=queue_type == "quorum" or durable is not False,
        queue_type=queue_type,
        max_priority=max_priority,
        message_ttl_ms=optional_duration("message_ttl", message_ttl, problems),
        timeout_ms=optional_duration("timeout", timeout, problems),
        retry=_optional_retry(retry, problems),
        concurrency=queue_concurrency(concurrency, problems),
        rate=queue_rate(rate, burst, problems),
    )
    return _finish(f"queue {describe(name)}", declared, problems)


def job(
    name: str,
    *,
    queue: Queue | str,
    handler: Handler,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    decode: Callable[[Any], Any] | None = None,
    concurrency: Concurrency | None = None,
    rate: Rate | None = None,
    unique: Unique | None = None,
    cron: str | None = None,
    tz: str | None = None,
    every: Duration | None = None,
    payload: Any = None,
    catch_up: int | None = None,
) -> Job:
    """A job type and its handler.

    `queue` is a `queue(...)` of the plugin or its name; `handler(payload, ctx)` a plain
    function (not `async`); `retry` replaces the queue's policy; `decode(json)` turns the
    parsed JSON into the payload, and what it raises dead-letters the job as a decode error.
    Per key of the payload, fleet-wide: `concurrency=Concurrency(key, limit)`,
    `rate=Rate(limit, key=..., burst=..., respect_retry_after=...)` (no key: the job type as
    a whole) and `unique=Unique(key, for_)`. A periodic job: `cron` with `tz` (default UTC),
    or `every` (at least 1s), with `payload` (default `{}`) and `catch_up` (0..=1000).
    Raises `DeclarationError` listing every problem.
    """
    problems: list[str] = []
    _check_name(name, _job_type_rule, problems)
    queue_name = queue.name if isinstance(queue, Queue) else queue
    if not isinstance(queue_name, str):
        problems.append(
            f"`queue` must be a queue of the plugin (from `queue(...)`) or its name, got {describe(queue)}"
        )
    if not callable(handler):
        problems.append(
            f"`handler` must be a function `(payload, ctx) -> None`, got {describe(handler)}"
        )
    elif inspect.iscoroutinefunction(handler):
        problems.append(
            "`handler` is `async`, which Python plugins do not support yet: make it a plain `def`"
        )
    if decode is not None and not callable(decode):
        problems.append(f"`decode` must be a function `(json) -> payload`, got {describe(decode)}")
    declared = Job(
        name=name,
        queue=queue_name,
        handler=handler,
        retry=_optional_retry(retry, problems),
        timeout_ms=optional_duration("timeout", timeout, problems),
        decode=decode,
        concurrency=key_cap(concurrency, problems),
        rate=key_rate(rate, problems),
        unique=unique_key(unique, problems),
        schedule=schedule(cron, tz, every, payload, catch_up, problems),
    )
    return _finish(f"job {describe(name)}", declared, problems)


def plugin(*, name: str, queues: Sequence[Queue], jobs: Sequence[Job]) -> Plugin:
    """The plugin, which its module binds to `PLUGIN`: every job goes to one of `queues`,
    names are unique. Raises `DeclarationError` listing every problem."""
    problems: list[str] = []
    if not isinstance(name, str) or name.strip() == "":
        problems.append(f"`name` must be a non-empty string, got {describe(name)}")
    elif len(name.encode()) > 200 or _CONTROL.search(name):
        problems.append("`name` must be at most 200 bytes, without control characters")
    queue_names: list[str] = []
    for q in queues:
        if not isinstance(q, Queue):
            problems.append(f"`queues` holds {describe(q)}, which is not a `queue(...)`")
        elif q.name in queue_names:
            problems.append(f"queue {describe(q.name)} is declared twice")
        else:
            queue_names.append(q.name)
    routes: dict[str, Job] = {}
    for j in jobs:
        if not isinstance(j, Job):
            problems.append(f"`jobs` holds {describe(j)}, which is not a `job(...)`")
            continue
        if j.name in routes:
            problems.append(f"job {describe(j.name)} is declared twice")
        routes[j.name] = j
        if j.queue not in queue_names:
            known = ", ".join(map(describe, queue_names)) or "none"
            problems.append(
                f"job {describe(j.name)} goes to queue {describe(j.queue)}, which is not one of "
                f"the plugin's queues ({known})"
            )
    if not routes:
        problems.append("`jobs` is empty: a plugin handles at least one job type")
    declared = Plugin(name=name, queues=tuple(queues), jobs=tuple(jobs), _routes=routes)
    return _finish(f"plugin {describe(name)}", declared, problems)


def _optional_retry(retry: Retry | None, problems: list[str]) -> RetryPolicy | None:
    if retry is None:
        return None
    if not isinstance(retry, Retry):
        problems.append(
            f"`retry` must be a `Retry(...)` such as `Retry(max_attempts=3)`, got {describe(retry)}"
        )
        return None
    local: list[str] = []
    max_attempts = _default(retry.max_attempts, _DEFAULT_ATTEMPTS)
    integer("max_attempts", max_attempts, 1, _U32, local, "at least 1 (1 means no retries)")
    kind = _default(retry.backoff, "exponential")
    backoff: NoBackoff | FixedBackoff | ExponentialBackoff | None = None
    if kind not in ("none", "fixed", "exponential"):
        local.append(f'`backoff` must be "none", "fixed" or "exponential", got {describe(kind)}')
    else:
        _foreign_keys(retry, kind, local)
    if kind == "none":
        backoff = NoBackoff()
    elif kind == "fixed":
        if retry.delay is None:
            local.append(
                '`backoff="fixed"` needs `delay`, the wait before every retry: add e.g. `delay="30s"`'
            )
        delay_ms = _hold_delay("delay", retry.delay, None, local)
        backoff = FixedBackoff(delay_ms) if delay_ms is not None else None
    elif kind == "exponential":
        base_ms = _hold_delay("base", retry.base, _DEFAULT_BASE_MS, local)
        max_ms = _hold_delay("max", retry.max, _DEFAULT_MAX_MS, local)
        factor = _default(retry.factor, _DEFAULT_FACTOR)
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 0 < factor < float("inf")
        ):
            local.append(
                f"`factor` must be finite and greater than 0, got {describe(factor)}: write e.g. `factor=2.0`"
            )
        if base_ms is not None and max_ms is not None and base_ms > max_ms:
            local.append(
                f"`base` ({format_ms(base_ms)}{', the default' if retry.base is None else ''}) exceeds `max` "
                f"({format_ms(max_ms)}{', the default' if retry.max is None else ''}): the first wait cannot be "
                "longer than the cap; lower `base` or raise `max`"
            )
        jitter = _default(retry.jitter, True)
        if not isinstance(jitter, bool):
            local.append(f"`jitter` must be True or False, got {describe(jitter)}")
        if base_ms is not None and max_ms is not None:
            backoff = ExponentialBackoff(base_ms, float(factor), max_ms, jitter)
    problems.extend(f"retry: {problem}" for problem in local)
    return RetryPolicy(max_attempts, backoff) if not local and backoff is not None else None


def _foreign_keys(retry: Retry, kind: str, problems: list[str]) -> None:
    """A key set for another backoff than `kind`, named with the backoff it belongs to."""
    for key in (f.name for f in fields(retry)):
        owner = _OWNER.get(key)
        if owner is None or owner == kind or getattr(retry, key) is None:
            continue
        if kind == "none":
            problems.append(
                f'`{key}` does not apply to `backoff="none"`, which takes no other keys: remove '
                f'`{key}`, or write `backoff="{owner}"`'
            )
        else:
            default = " (the default)" if retry.backoff is None else ""
            problems.append(
                f'`{key}` applies only to `backoff="{owner}"`, but this policy is '
                f'`backoff="{kind}"`{default}: remove `{key}`, or write `backoff="{owner}"`'
            )


def _hold_delay(
    key: str, value: Duration | None, fallback: int | None, problems: list[str]
) -> int | None:
    """A retry wait: a duration no longer than a broker hold queue can hold a job."""
    ms = fallback if value is None else duration(key, value, problems)
    if ms is not None and ms > MAX_DELAY_MS:
        problems.append(
            f"`{key}` of {format_ms(ms)} exceeds the longest hold of {format_ms(MAX_DELAY_MS)} "
            "(about 24.8 days, `MAX_DELAY`): a retry waits in a broker hold queue, which cannot "
            "hold a job longer"
        )
        return None
    return ms


def _default(value: _T | None, fallback: _T) -> _T:
    return fallback if value is None else value


def _check_name(name: object, rule: Callable[[str], str | None], problems: list[str]) -> None:
    if not isinstance(name, str):
        problems.append(f"the name must be a string, got {describe(name)}")
        return
    reason = rule(name)
    if reason is not None:
        problems.append(f"the name is refused: {reason}")


def _job_type_rule(name: str) -> str | None:
    """The host's rule for job types, which travel in the AMQP `type` property."""
    if name == "":
        return "it is empty"
    if len(name.encode()) > 255:
        return "it is longer than 255 bytes"
    if _CONTROL.search(name):
        return "it contains control characters"
    return None


def _queue_name_rule(name: str) -> str | None:
    """The host's rule for queue names (its hold and dead-letter queues are named after them)."""
    if name == "":
        return "it is empty"
    if _CONTROL_OR_SPACE.search(name):
        return "it contains whitespace or control characters"
    if name.startswith("amq."):
        return "the `amq.` prefix is reserved by the broker"
    if name.endswith(".dead") or ".deferred." in name:
        return "it looks like a dead-letter or hold queue name"
    return None


def _finish(owner: str, declared: _T, problems: list[str]) -> _T:
    if problems:
        raise DeclarationError(owner, problems)
    return declared
