"""Running one delivery of a declared plugin, for the component and for the test helper
alike: find the job type's handler, decode the payload, call the handler, and turn what it
raised into a `JobError`.
"""

from __future__ import annotations

import json

from ._context import Context
from ._declare import Handler, Plugin
from ._errors import JobError, fatal, outcome_of


def run_delivery(declared: Plugin, ctx: Context, payload: bytes) -> JobError | None:
    """How the delivery ended: `None` when the job completed."""
    route = declared.route(ctx.job_type)
    if route is None:
        handled = ", ".join(j.name for j in declared.jobs)
        return fatal(f"plugin has no handler for job type `{ctx.job_type}` (it handles: {handled})")
    try:
        value = json.loads(payload.decode("utf-8"))
        if route.decode is not None:
            value = route.decode(value)
    except Exception as error:
        return JobError("decode", str(error) or type(error).__name__)
    return call_handler(route.handler, value, ctx)


def call_handler(handler: Handler, payload: object, ctx: Context) -> JobError | None:
    """Call `handler`; `None` when it returned, else what its exception means."""
    try:
        handler(payload, ctx)
    except Exception as raised:
        return outcome_of(raised)
    return None
