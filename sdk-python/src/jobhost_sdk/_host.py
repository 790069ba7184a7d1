"""Where a handler's HTTP requests and config reads go: the host's imports in the
component (`jobhost_sdk.guest` installs them), the test's recorder during a
`TestContext.run`, and nowhere otherwise. `http` and `config` are free functions, as in the
Rust SDK, so they find the backend here rather than through `ctx`; a component runs one job
on one thread, and so does a native test run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .http import Request, Response


class Backend(Protocol):
    """What stands for the host's `wasi:http` and `wasi:config`."""

    def send(self, request: Request) -> Response:
        """The whole response to `request`, or an `HttpError` when it got none."""
        ...

    def config(self, key: str) -> str | None:
        """The value of `key`, `None` when the operator gave none; a `ConfigError` when
        the host could not read it."""
        ...


current: Backend | None = None
"""The backend of the job running now, if any."""


def install(backend: Backend | None) -> Backend | None:
    """Make `backend` current; returns the previous one, to restore after a run."""
    global current
    previous, current = current, backend
    return previous
