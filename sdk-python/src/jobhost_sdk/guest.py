"""The component side of a Python plugin: the `handler` export of the `jobhost:plugin` world
over a declared plugin. `jobhost build` generates an app module that binds
`Handler = serve(PLUGIN)`, and componentize-py turns it into the component; this module is
imported natively only by the SDK's own tests, over bindings componentize-py generated for
the world `jobhost_sdk.build` makes (`jobhost:plugin` with `wasi:http` and `wasi:config`).

WIT values as componentize-py's bindings (`wit_world`) pass them: records are dataclasses
with snake_case fields, a variant case is a class of its own (`JobError_Fatal(value)`), an
enum is an `Enum`, `u64` an `int`, an `option` the value or `None`, an exported `result` the
returned value or a raised `Err(value)`, and an imported one returns its `ok` value or
raises `Err(value)`.
"""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

from . import _host, _wasi
from ._context import Context, Delivery, EnqueueError, Level
from ._declare import ExponentialBackoff, FixedBackoff, Plugin, RetryPolicy
from ._limits import KeyCap, KeyRate, RateLimit, UniqueKey
from ._schedule import CronTiming, Schedule
from ._errors import JobError
from ._run import run_delivery


def serve(declared: Plugin) -> type[exports.Handler]:
    """The `Handler` class serving `declared` (the `PLUGIN` of the plugin's module)."""

    class Handler(exports.Handler):
        def manifest(self) -> types.Manifest:
            return _manifest(declared)

        def handle(self, context: types.JobContext, payload: bytes) -> None:
            delivery = Delivery(
                job_id=context.job_id,
                job_type=context.job_type,
                queue=context.queue,
                attempt=context.attempt,
                max_attempts=context.max_attempts,
                deferrals=context.deferrals,
                priority=context.priority,
                age_ms=context.age,
            )
            # The handler's `http` requests and `config` reads go to the host's imports.
            previous = _host.install(_wasi.Host())
            try:
                error = run_delivery(declared, Context(delivery, _HostSink()), payload)
            except BaseException as escaped:
                # `run_delivery` makes every `Exception` an outcome; what escapes it
                # (`SystemExit`, `KeyboardInterrupt`) traps the instance, and the host reports
                # the attempt as crashed with this message instead of a bare trap.
                host.report_panic(f"uncaught {type(escaped).__name__}: {escaped}")
                raise
            finally:
                _host.install(previous)
            if error is not None:
                raise Err(_wit_error(error))

    return Handler


class _HostSink:
    """The host's `log` and `enqueue` imports."""

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        host.log(types.Level[level.upper()], message, fields)

    def enqueue(self, job_type: str, payload: bytes, delay_ms: int | None) -> str:
        try:
            return host.enqueue(job_type, payload, delay_ms)
        except Err as refused:
            raise EnqueueError(str(refused.value)) from None


def _wit_error(error: JobError) -> types.JobError:
    if error.kind == "deferred":
        delay = error.delay_ms if error.delay_ms is not None else 0
        return types.JobError_Deferred(types.Deferral(delay, error.message, error.retry_after))
    if error.kind == "fatal":
        return types.JobError_Fatal(error.message)
    if error.kind == "decode":
        return types.JobError_Decode(error.message)
    return types.JobError_Retryable(error.message)


def _manifest(declared: Plugin) -> types.Manifest:
    queues = [
        types.QueueConfig(
            name=q.name,
            prefetch=q.prefetch,
            durable=q.durable,
            queue_type=types.QueueType[q.queue_type.upper()],
            max_priority=q.max_priority,
            message_ttl=q.message_ttl_ms,
            retry=_retry_policy(q.retry),
            timeout=q.timeout_ms,
            concurrency=q.concurrency,
            rate=None if q.rate is None else _rate_limit(q.rate),
        )
        for q in declared.queues
    ]
    jobs = [
        types.JobConfig(
            name=j.name,
            queue=j.queue,
            retry=_retry_policy(j.retry),
            timeout=j.timeout_ms,
            concurrency=_key_concurrency(j.concurrency),
            rate=_key_rate(j.rate),
            unique=_unique_key(j.unique),
            schedule=_job_schedule(j.schedule),
        )
        for j in declared.jobs
    ]
    return types.Manifest(name=declared.name, queues=queues, jobs=jobs)


def _rate_limit(rate: RateLimit) -> types.RateLimit:
    return types.RateLimit(rate.count, types.RateUnit[rate.unit.upper()], rate.burst)


def _key_concurrency(cap: KeyCap | None) -> types.KeyConcurrency | None:
    return None if cap is None else types.KeyConcurrency(cap.key, cap.limit)


def _key_rate(limit: KeyRate | None) -> types.KeyRate | None:
    if limit is None:
        return None
    return types.KeyRate(limit.key, _rate_limit(limit.rate), limit.respect_retry_after)


def _unique_key(unique: UniqueKey | None) -> types.UniqueKey | None:
    return None if unique is None else types.UniqueKey(unique.key, unique.for_ms)


def _job_schedule(schedule: Schedule | None) -> types.JobSchedule | None:
    if schedule is None:
        return None
    timing: types.ScheduleTiming
    match schedule.timing:
        case CronTiming(expression, tz):
            timing = types.ScheduleTiming_Cron(types.CronSchedule(expression, tz))
        case every:
            timing = types.ScheduleTiming_Every(every.period_ms)
    return types.JobSchedule(timing, schedule.payload, schedule.catch_up)


def _retry_policy(policy: RetryPolicy | None) -> types.RetryPolicy | None:
    if policy is None:
        return None
    backoff: types.Backoff
    match policy.backoff:
        case FixedBackoff(delay_ms):
            backoff = types.Backoff_Fixed(delay_ms)
        case ExponentialBackoff(base_ms, factor, max_ms, jitter):
            backoff = types.Backoff_Exponential(
                types.ExponentialBackoff(base_ms, factor, max_ms, jitter)
            )
        case _:
            backoff = types.Backoff_None_()
    return types.RetryPolicy(policy.max_attempts, backoff)
