"""A job type's periodic schedule (the Rust SDK's sdk/src/schedule.rs, docs/schedules.md), in
Python's spelling: `cron="0 7 * * *"` with `tz="Europe/Paris"` (default UTC), or
`every="30s"` (at least 1s); `payload=`, the value each firing's job carries (default `{}`),
and `catch_up=` (0..=1000, default 0), how many ticks no host fired in time fire late.
Checked as far as the derive checks; the host checks the cron expression and the time zone
when it loads the plugin, and refuses it naming what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._checks import duration, integer
from ._duration import Duration, describe, format_ms

EVERY_MIN_MS = 1_000
"""The shortest `every`."""
CATCH_UP_MAX = 1000
"""The most missed ticks a schedule may fire late."""
PAYLOAD_MAX = 64 * 1024
"""The largest payload the host accepts for a schedule's job, in bytes of JSON."""


@dataclass(frozen=True)
class CronTiming:
    """At each match of `expression` (five fields, or six with seconds first), read in the
    IANA time zone `tz` (UTC when empty)."""

    expression: str
    tz: str


@dataclass(frozen=True)
class EveryTiming:
    """At every multiple of `period_ms` since the Unix epoch."""

    period_ms: int


@dataclass(frozen=True)
class Schedule:
    """A checked schedule; `payload` is JSON text."""

    timing: CronTiming | EveryTiming
    payload: str
    catch_up: int


def schedule(
    cron: str | None,
    tz: str | None,
    every: Duration | None,
    payload: Any,
    catch_up: int | None,
    problems: list[str],
) -> Schedule | None:
    """The schedule `job(...)`'s keyword arguments declare, or None when they declare none."""
    if cron is None and every is None:
        for lone, value in (("tz", tz), ("payload", payload), ("catch_up", catch_up)):
            if value is not None:
                problems.append(
                    f'`{lone}` without a schedule: write `cron="..."` or `every="..."` too'
                )
        return None
    before = len(problems)
    timing: CronTiming | EveryTiming | None = None
    if cron is not None and every is not None:
        problems.append("write one of `cron` and `every`, not both")
    elif cron is not None:
        timing = _cron(cron, "" if tz is None else tz, problems)
    elif every is not None:
        if tz is not None:
            problems.append("`tz` applies to `cron` only, not to `every`")
        period_ms = duration("every", every, problems)
        if period_ms is not None and period_ms < EVERY_MIN_MS:
            problems.append(
                f"`every` must be at least {format_ms(EVERY_MIN_MS)}, got {format_ms(period_ms)}"
            )
        timing = None if period_ms is None else EveryTiming(period_ms)
    text = _payload(payload, problems)
    catch_up = 0 if catch_up is None else catch_up
    integer("catch_up", catch_up, 0, CATCH_UP_MAX, problems)
    if len(problems) > before or timing is None:
        return None
    return Schedule(timing, text, catch_up)


def _cron(expression: object, tz: object, problems: list[str]) -> CronTiming | None:
    if not isinstance(expression, str):
        problems.append(f'`cron` must be a string such as "0 7 * * *", got {describe(expression)}')
    elif not 5 <= (fields := len(expression.split())) <= 6:
        problems.append(
            f"`cron` {describe(expression)} has {fields} fields: write five (minute hour "
            "day-of-month month day-of-week) or six (seconds first)"
        )
    if not isinstance(tz, str):
        problems.append(
            f'`tz` must be an IANA time zone name such as "Europe/Paris", got {describe(tz)}'
        )
    if isinstance(expression, str) and isinstance(tz, str):
        return CronTiming(expression, tz)
    return None


def _payload(value: Any, problems: list[str]) -> str:
    """The payload as JSON text, as `ctx.enqueue` writes a follow-up's."""
    if value is None:
        return "{}"
    try:
        # NaN and infinities are not JSON, whatever Python's default says.
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        problems.append(f"`payload` must be JSON, such as `{{\"kind\": \"daily\"}}`: {error}")
        return ""
    size = len(text.encode())
    if size > PAYLOAD_MAX:
        problems.append(
            f"`payload` is {size} bytes of JSON; a schedule's payload may have at most "
            f"{PAYLOAD_MAX}"
        )
    return text
