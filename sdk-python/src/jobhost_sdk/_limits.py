"""Fleet-wide limits (the Rust SDK's sdk/src/limits.rs, docs/flow-control.md), in Python's
spelling: on a queue, `concurrency=` (jobs running at once) and `rate=` ("50/s", "10/m",
"1000/h") with `burst=`; on a job type, per key of its payload, `concurrency=Concurrency(key,
limit)`, `rate=Rate(limit, key=..., burst=..., respect_retry_after=...)` (without a key, the
job type as a whole) and `unique=Unique(key, for_)`. The same grammar, defaults and bounds
as the derives, so the manifest of a Python plugin says what a Rust plugin with the same
declarations says; the operator's grants file may override the caps and rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeVar

from ._checks import duration, integer
from ._duration import MAX_DELAY_MS, Duration, describe, format_ms

RateUnit = Literal["second", "minute", "hour"]
_T = TypeVar("_T")

MAX_CONCURRENCY = 1000
"""The largest cap: at most this many jobs of a queue, or of one key, run at once."""
MAX_RATE_COUNT = 100_000
"""The largest count of a rate."""
MAX_PER_SECOND = 1000
"""The fastest rate, in jobs a second."""
MAX_BURST = 10_000
"""The largest burst: a bucket saves up at most this many jobs."""

# A key names a top-level payload field.
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
# Each unit of a rate: its name in the WIT's `rate-unit`, and its length in seconds.
_UNITS: dict[str, tuple[RateUnit, int]] = {
    "s": ("second", 1),
    "m": ("minute", 60),
    "h": ("hour", 3_600),
}


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` (1..=1000) jobs whose payload holds one value under its top-level field
    `key` run at once, across the fleet."""

    key: str
    limit: int


@dataclass(frozen=True)
class Rate:
    """The jobs of one `key` (without one, of the job type as a whole) start at most at
    `limit` ("10/s"), saving up at most `burst` (1..=10000, default the count); with
    `respect_retry_after`, a job deferred by a service's `Retry-After` (`retry_after(...)`)
    holds the key's other jobs back as long, fleet-wide."""

    limit: str
    key: str | None = None
    burst: int | None = None
    respect_retry_after: bool = False


@dataclass(frozen=True)
class Unique:
    """While a job whose payload holds one value under its top-level field `key` is queued,
    held or running (for at most `for_` after it was enqueued), another enqueue of that
    value is refused and answers the existing job's id."""

    key: str
    for_: Duration


@dataclass(frozen=True)
class RateLimit:
    """A checked rate: `count` jobs per `unit`, at most `burst` at once after a quiet spell."""

    count: int
    unit: RateUnit
    burst: int


@dataclass(frozen=True)
class KeyCap:
    """A checked `Concurrency`."""

    key: str
    limit: int


@dataclass(frozen=True)
class KeyRate:
    """A checked `Rate`."""

    key: str | None
    rate: RateLimit
    respect_retry_after: bool


@dataclass(frozen=True)
class UniqueKey:
    """A checked `Unique`."""

    key: str
    for_ms: int


def queue_concurrency(concurrency: int | None, problems: list[str]) -> int | None:
    """A queue's `concurrency=`: 1 to `MAX_CONCURRENCY`."""
    if concurrency is not None:
        integer("concurrency", concurrency, 1, MAX_CONCURRENCY, problems)
    return concurrency


def queue_rate(rate: str | None, burst: int | None, problems: list[str]) -> RateLimit | None:
    """A queue's `rate=` with its `burst=`, which needs a rate."""
    if rate is None:
        if burst is not None:
            problems.append('`burst` without a `rate`: write `rate="10/s"` too')
        return None
    return _rate("rate", rate, burst, problems)


def key_cap(concurrency: Concurrency | None, problems: list[str]) -> KeyCap | None:
    """A job's `concurrency=Concurrency(...)`, checked."""
    example = 'Concurrency(key="customer_id", limit=2)'
    if concurrency is None or _not_a("concurrency", concurrency, Concurrency, example, problems):
        return None
    local: list[str] = []
    _key(concurrency.key, local)
    integer("limit", concurrency.limit, 1, MAX_CONCURRENCY, local)
    return _nested("concurrency", KeyCap(concurrency.key, concurrency.limit), local, problems)


def key_rate(rate: Rate | None, problems: list[str]) -> KeyRate | None:
    """A job's `rate=Rate(...)`, checked."""
    if rate is None or _not_a("rate", rate, Rate, 'Rate("10/s", key="customer_id")', problems):
        return None
    local: list[str] = []
    if rate.key is not None:
        _key(rate.key, local)
    limit = _rate("limit", rate.limit, rate.burst, local)
    if not isinstance(rate.respect_retry_after, bool):
        local.append(
            f"`respect_retry_after` must be True or False, got {describe(rate.respect_retry_after)}"
        )
    checked = None if limit is None else KeyRate(rate.key, limit, rate.respect_retry_after)
    return _nested("rate", checked, local, problems)


def unique_key(unique: Unique | None, problems: list[str]) -> UniqueKey | None:
    """A job's `unique=Unique(...)`, checked: `for_` no longer than a job can be held."""
    example = 'Unique(key="order_id", for_="10m")'
    if unique is None or _not_a("unique", unique, Unique, example, problems):
        return None
    local: list[str] = []
    _key(unique.key, local)
    for_ms = duration("for_", unique.for_, local)
    if for_ms is not None and for_ms > MAX_DELAY_MS:
        local.append(
            f"`for_` of {format_ms(for_ms)} is longer than a job can be held, "
            f"{format_ms(MAX_DELAY_MS)} (about 24.8 days, `MAX_DELAY`)"
        )
    checked = None if for_ms is None else UniqueKey(unique.key, for_ms)
    return _nested("unique", checked, local, problems)


def _not_a(name: str, value: object, kind: type, example: str, problems: list[str]) -> bool:
    """Whether `value` is not a `kind` (a problem, then), though its type hint says it is."""
    if isinstance(value, kind):
        return False
    problems.append(
        f"`{name}` must be a `{kind.__name__}(...)` such as `{example}`, got {describe(value)}"
    )
    return True


def _nested(name: str, checked: _T | None, local: list[str], problems: list[str]) -> _T | None:
    """`checked` unless `local` holds problems, which go to `problems` prefixed with `name`
    as a retry policy's are."""
    problems.extend(f"{name}: {problem}" for problem in local)
    return None if local else checked


def _key(key: object, problems: list[str]) -> None:
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        problems.append(
            f"`key` {describe(key)}: it must be 1 to 64 ASCII letters, digits, `_` or `-`, the "
            "name of a top-level payload field"
        )


def _rate(name: str, text: object, burst: int | None, problems: list[str]) -> RateLimit | None:
    """`text` as `COUNT/UNIT` (the Rust SDK's `Rate::parse`), with `burst` (default the count,
    at most `MAX_BURST`)."""
    if not isinstance(text, str):
        problems.append(f'`{name}` must be a string such as "50/s", got {describe(text)}')
        return None

    def refused(why: str) -> None:
        problems.append(f"`{name}` {describe(text)}: {why}")

    count_text, slash, unit_text = text.partition("/")
    if not slash:
        return refused("write it as COUNT/UNIT, e.g. `10/s`, `10/m` or `10/h`")
    if unit_text not in _UNITS:
        return refused("the unit must be `s`, `m` or `h`")
    unit, seconds = _UNITS[unit_text]
    count = int(count_text) if count_text.isascii() and count_text.isdigit() else 0
    if not 1 <= count <= MAX_RATE_COUNT:
        return refused(f"the count must be 1 to {MAX_RATE_COUNT}")
    if count > MAX_PER_SECOND * seconds:
        return refused(f"at most {MAX_PER_SECOND} jobs a second")
    if burst is None:
        return RateLimit(count, unit, min(count, MAX_BURST))
    before = len(problems)
    integer("burst", burst, 1, MAX_BURST, problems)
    return RateLimit(count, unit, burst) if len(problems) == before else None
