"""jobhost_sdk: write jobhost job handlers in Python. See docs/python.md.

    from jobhost_sdk import Retry, fatal, job, plugin, queue

    work = queue("greeter.work", retry=Retry(max_attempts=3))

    def greet(payload, ctx):
        ctx.info("hello", name=payload["name"])

    PLUGIN = plugin(name="greeter", queues=[work], jobs=[job("greeter.Greet", queue=work, handler=greet)])

`jobhost_sdk.http` sends HTTP requests and `jobhost_sdk.config` reads the operator's
config values and secrets; `jobhost_sdk.testing` runs a handler natively; `jobhost_sdk.guest` and `jobhost_sdk.build`
are what `jobhost build` uses.
"""

from ._context import LEVELS, Context, EnqueueError, Level
from ._declare import (
    DeclarationError,
    Handler,
    Job,
    Plugin,
    Queue,
    Retry,
    RetryPolicy,
    job,
    plugin,
    queue,
)
from ._duration import MAX_DELAY, Duration, parse_duration
from ._limits import Concurrency, Rate, Unique
from ._errors import JobError, deferred, fatal, retry_after, retryable

__all__ = [
    "LEVELS",
    "MAX_DELAY",
    "Concurrency",
    "Context",
    "DeclarationError",
    "Duration",
    "EnqueueError",
    "Handler",
    "Job",
    "JobError",
    "Level",
    "Plugin",
    "Queue",
    "Rate",
    "Retry",
    "RetryPolicy",
    "Unique",
    "deferred",
    "fatal",
    "job",
    "parse_duration",
    "plugin",
    "queue",
    "retry_after",
    "retryable",
]
