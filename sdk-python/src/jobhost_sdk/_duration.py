"""The duration grammar of jobhost (the Rust SDK's `parse_duration`, docs/plugin-authors.md
"The grammar"): an integer, optional whitespace and an optional unit ms, s, m, h or d; a
bare integer means seconds; zero is refused. Kept identical so that a policy reads the same
in Rust attributes, Python and JavaScript declarations and `jobhost` command lines.

A Python caller may also give a `datetime.timedelta` of whole milliseconds. Internally every
duration is an `int` of milliseconds, the unit of the WIT's `duration-ms`.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

MAX_DELAY = timedelta(milliseconds=2**31 - 1)
"""The longest wait a broker hold queue can hold a job: 2^31 - 1 ms, about 24.8 days."""

MAX_DELAY_MS = 2**31 - 1

# The WIT's `duration-ms` is a u64; nothing longer fits through the boundary.
_MAX_MS = 2**64 - 1
_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_FORM = re.compile(r"([0-9]+)\s*([A-Za-z]*)", re.ASCII)
_GRAMMAR = (
    "write an integer and an optional unit ms, s, m, h or d, e.g. `500ms`, `30s` or `2 m` "
    "(a bare integer means seconds), or a `timedelta`"
)

Duration = str | timedelta
"""A duration as a declaration takes it: `"30s"` in the grammar, or a `timedelta`."""


def parse_duration(value: Duration) -> int:
    """`value` in milliseconds.

    Raises `ValueError` naming the input and the grammar: for a malformed or zero string, a
    `timedelta` that is not a positive whole number of milliseconds, or anything else
    (an `int` is refused, because its unit would be a guess).
    """
    if isinstance(value, timedelta):
        return _from_timedelta(value)
    if not isinstance(value, str):
        raise ValueError(f'a duration is a string such as "30s", got {describe(value)}: {_GRAMMAR}')
    text = value.strip()
    if text == "":
        raise ValueError(f"empty duration: {_GRAMMAR}")
    match = _FORM.fullmatch(text)
    if match is None:
        raise ValueError(f"malformed duration `{value}`: {_GRAMMAR}")
    digits, unit = match.groups()
    unit_ms = 1_000 if unit == "" else _UNITS.get(unit)
    if unit_ms is None:
        raise ValueError(f"unknown unit `{unit}` in duration `{value}`: use ms, s, m, h or d")
    ms = int(digits) * unit_ms
    if ms == 0:
        raise ValueError(f"zero duration `{value}`: a duration must be positive")
    if ms > _MAX_MS:
        raise ValueError(f"duration `{value}` overflows: at most {_MAX_MS} milliseconds fit")
    return ms


def _from_timedelta(value: timedelta) -> int:
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros <= 0 or micros % 1_000 != 0:
        raise ValueError(
            f"a duration must be a positive whole number of milliseconds, got {value!r}"
        )
    return micros // 1_000


def format_ms(ms: int) -> str:
    """`1500` -> `"1.5s"`, for messages."""
    if ms < 1_000:
        return f"{ms}ms"
    return f"{ms // 1_000}s" if ms % 1_000 == 0 else f"{ms / 1_000}s"


def describe(value: object) -> str:
    """A value as an error message quotes it: strings in double quotes, the rest as `repr`."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
