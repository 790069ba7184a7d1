"""The little of URLs that sending a request needs (the Rust SDK's `http::url`): splitting
`http(s)://authority/path?query` into the parts `wasi:http` takes, resolving a redirect's
`Location`, and a redacted form for reasons. Hosts are sent as written and dot segments are
left to the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._text import bounded

LABEL_BYTES = 256
"""The longest URL a reason quotes."""


@dataclass(frozen=True)
class Target:
    """A URL split for `wasi:http`: the path and query are at least `/`, without the
    fragment, which is never sent."""

    https: bool
    authority: str
    path_and_query: str


def split(url: str) -> Target:
    """`url` split; `ValueError` saying why it cannot be sent."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("it is no absolute URL (`http://host/path`)")
    if scheme.lower() not in ("http", "https"):
        raise ValueError("its scheme is neither `http` nor `https`")
    end = re.search(r"[/?#]", rest)
    cut = end.start() if end else len(rest)
    authority, tail = rest[:cut], rest[cut:]
    if authority == "":
        raise ValueError("it names no host")
    if "@" in authority:
        raise ValueError(
            "it carries user information, which is not sent: use an `authorization` header"
        )
    tail = tail.split("#", 1)[0]
    path_and_query = tail if tail.startswith("/") else "/" + tail
    return Target(scheme.lower() == "https", authority, path_and_query)


def origin(url: str) -> tuple[bool, str] | None:
    """The scheme and authority of `url`, lowercase, to tell whether two URLs share an
    origin."""
    try:
        target = split(url)
    except ValueError:
        return None
    return (target.https, target.authority.lower())


def redacted(url: str) -> str:
    """`url` without its query, fragment and user information, bounded: a query often
    carries an API key, and reasons go to logs and dead letters."""
    without_query = re.split(r"[?#]", url, maxsplit=1)[0]
    scheme, sep, rest = without_query.partition("://")
    if sep:
        slash = rest.find("/")
        authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
        shown = f"{scheme}://{authority.rsplit('@', 1)[-1]}{path}"
    else:
        shown = without_query
    return bounded(shown.encode(), LABEL_BYTES)


def resolve(base: str, location: str) -> str | None:
    """The absolute URL a redirect from `base` to `location` leads to; `None` when it does
    not lead to an http(s) URL."""
    location = location.strip()
    if "://" in location:
        resolved = location
    else:
        try:
            target = split(base)
        except ValueError:
            return None
        scheme = "https" if target.https else "http"
        if location.startswith("//"):
            resolved = f"{scheme}:{location}"
        elif location.startswith("/"):
            resolved = f"{scheme}://{target.authority}{location}"
        else:
            path = target.path_and_query.split("?", 1)[0]
            directory = path if location.startswith("?") else path[: path.rfind("/") + 1]
            resolved = f"{scheme}://{target.authority}{directory}{location}"
    try:
        split(resolved)
    except ValueError:
        return None
    return resolved
