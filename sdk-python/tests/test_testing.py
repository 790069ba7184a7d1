from datetime import timedelta

from jobhost_sdk import EnqueueError, deferred, fatal, retry_after, retryable
from jobhost_sdk.testing import FollowUp, TestContext


def send(payload, ctx):
    if "@" not in payload["to"]:
        raise fatal(f"invalid address `{payload['to']}`")
    if ctx.attempt < 2:
        raise retryable("smtp server busy")
    ctx.info("sent", to=payload["to"], bytes=11, tags=["a"])
    ctx.enqueue("a.Receipt", {"to": payload["to"]}, delay="250ms")


def test_a_completed_run_records_its_logs_and_follow_ups():
    run = TestContext(attempt=2).run(send, {"to": "a@b"})
    assert run.error is None
    assert run.messages() == ["sent"]
    assert run.logs[0].level == "info"
    assert run.logs[0].fields == [("to", "a@b"), ("bytes", "11"), ("tags", '["a"]')]
    assert run.logs[0].field("bytes") == "11"
    assert run.follow_ups == [FollowUp("follow-up-1", "a.Receipt", {"to": "a@b"}, 250)]


def test_raised_job_errors_are_the_outcome_and_other_exceptions_are_retryable():
    assert TestContext().run(send, {"to": "a@b"}).error == retryable("smtp server busy")
    assert TestContext().run(send, {"to": "nobody"}).error == fatal("invalid address `nobody`")
    run = TestContext().run(send, {})
    assert run.error == retryable("uncaught KeyError: 'to'")


def test_the_context_carries_the_delivery_and_knows_its_last_attempt():
    seen = {}

    def look(payload, ctx):
        seen.update(
            attempt=ctx.attempt, max=ctx.max_attempts, last=ctx.is_last_attempt, age=ctx.age
        )

    TestContext(attempt=3, age=timedelta(seconds=2)).run(look, None)
    assert seen == {"attempt": 3, "max": 3, "last": True, "age": timedelta(seconds=2)}
    TestContext(attempt=1, max_attempts=4).run(look, None)
    assert (seen["max"], seen["last"]) == (4, False)


def test_deferrals_carry_their_delay_and_an_unholdable_one_is_fatal():
    defer = deferred("1s", "greylisted")
    assert (defer.kind, defer.delay_ms, defer.retry_after, defer.message) == (
        "deferred",
        1_000,
        False,
        "greylisted",
    )
    assert retry_after(timedelta(seconds=2), "429").retry_after
    assert deferred("30d", "too long").kind == "fatal"
    assert deferred(5, "unitless").kind == "fatal"


def test_bad_log_levels_and_payloads_are_refused_as_in_the_component():
    def bad_level(payload, ctx):
        ctx.log("loud", "x")

    assert (
        TestContext()
        .run(bad_level, None)
        .error.message.startswith("uncaught ValueError: log level must be one of")
    )

    def bad_payload(payload, ctx):
        try:
            ctx.enqueue("a.B", {"n": float("nan")})
        except EnqueueError as error:
            ctx.warn(str(error))

    assert (
        TestContext()
        .run(bad_payload, None)
        .messages()[0]
        .startswith("a follow-up's payload must be JSON")
    )
