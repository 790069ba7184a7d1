"""The checks every declaration shares: each reads one argument, appends what is wrong with
it to `problems` (phrased as the Rust derives phrase it) and returns what it read, so a
declaration lists every problem at once instead of stopping at the first."""

from __future__ import annotations

from ._duration import Duration, describe, parse_duration


def optional_duration(key: str, value: Duration | None, problems: list[str]) -> int | None:
    return None if value is None else duration(key, value, problems)


def duration(key: str, value: Duration, problems: list[str]) -> int | None:
    try:
        return parse_duration(value)
    except ValueError as error:
        problems.append(f"`{key}`: {error}")
        return None


def integer(
    key: str, value: object, low: int, high: int, problems: list[str], rule: str = ""
) -> None:
    # `bool` is an `int` to Python, never to a declaration.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.append(
            f"`{key}` must be {rule or f'between {low} and {high}'}, got {describe(value)}"
        )
