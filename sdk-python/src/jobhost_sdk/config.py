"""Configuration values and secrets the operator gives this plugin (the Rust SDK's
`jobhost_sdk::config`), read with `get` or `require`:

    from jobhost_sdk import config

    def send(payload, ctx):
        relay = config.require("relay_url")          # fatal when the operator set none
        region = config.get("region") or "eu-west-1"

The operator writes them in the host's grants file, `jobhost.toml`, under the name of the
plugin's file (`plugins/NAME.wasm`; `jobhost build` names it after `[project] name`, with
underscores): plain values in `[plugins.NAME.config]`, secrets in `[plugins.NAME.secrets]`.
A plugin sees both in one key space, through `wasi:config/store`; a key neither table has
is `None`. Values are those of the grants file when the job started, so a job retried after
the operator fixed a value reads the new one.

Natively, the values are those given to `TestContext(config={...})` while its `run` calls
the handler, and none at all outside a run.
"""

from __future__ import annotations

from . import _host
from ._errors import JobError, JobErrorSource, fatal, retryable

__all__ = ["ConfigError", "get", "require"]


class ConfigError(JobErrorSource):
    """The host could not read a value (its source failed); uncaught, it fails the job as
    retryable, since trying again may find the source back."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        if self.kind == "upstream":
            return f"the configuration source failed: {self.message}"
        return f"reading the configuration failed: {self.message}"

    def job_error(self) -> JobError:
        return retryable(str(self))


def get(key: str) -> str | None:
    """The value of `key` (a config value or a secret), or `None` when the operator gave
    this plugin none. Raises `ConfigError` when the host could not read it."""
    if _host.current is None:
        return None
    return _host.current.config(key)


def require(key: str) -> str:
    """The value of `key`, which the plugin cannot work without: a missing key raises a
    fatal `JobError` that names it and where the operator sets it, since no retry within
    the job's policy would find it set."""
    value = get(key)
    if value is None:
        raise fatal(
            f"the plugin needs the configuration value `{key}`: set it in `jobhost.toml` under "
            "`[plugins.<plugin file name>.config]` (or `.secrets`)"
        )
    return value
