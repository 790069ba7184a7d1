from datetime import timedelta

import pytest

from jobhost_sdk import MAX_DELAY, DeclarationError, Retry, job, parse_duration, plugin, queue
from jobhost_sdk._declare import ExponentialBackoff, FixedBackoff, RetryPolicy


def handler(payload, ctx):
    pass


def test_durations_follow_the_grammar_of_the_rust_sdk():
    assert parse_duration("500ms") == 500
    assert parse_duration("30") == 30_000
    assert parse_duration(" 2 m ") == 120_000
    assert parse_duration("1d") == 86_400_000
    assert parse_duration(timedelta(seconds=1.5)) == 1_500
    for bad in [
        "",
        "0s",
        "-5s",
        "1.5s",
        "1h30m",
        "3w",
        30,
        timedelta(0),
        timedelta(microseconds=10),
    ]:
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_an_empty_retry_policy_takes_every_default_of_the_chapter():
    q = queue("work", retry=Retry())
    assert q.retry == RetryPolicy(
        3, ExponentialBackoff(base_ms=1_000, factor=2.0, max_ms=300_000, jitter=True)
    )
    assert (q.prefetch, q.max_priority, q.durable, q.queue_type) == (16, 10, True, "classic")
    assert queue("plain").retry is None, "no retry means no retries"


def test_a_key_of_another_backoff_is_refused_naming_the_backoff_it_belongs_to():
    with pytest.raises(DeclarationError) as refused:
        queue("work", retry=Retry(delay="5s"))
    assert (
        '`delay` applies only to `backoff="fixed"`, but this policy is `backoff="exponential"` (the default)'
        in str(refused.value)
    )


def test_every_problem_of_a_declaration_is_listed_in_one_error():
    with pytest.raises(DeclarationError) as refused:
        queue("work", prefetch=0, retry=Retry(max_attempts=0, backoff="fixed"))
    problems = refused.value.problems
    assert len(problems) == 3, problems
    assert problems[0] == "`prefetch` must be between 1 and 65535, got 0"
    assert problems[1] == "retry: `max_attempts` must be at least 1 (1 means no retries), got 0"
    assert problems[2].startswith('retry: `backoff="fixed"` needs `delay`')
    assert str(refused.value).startswith('queue "work":\n  - ')


def test_a_base_above_the_cap_and_a_wait_longer_than_a_hold_are_refused():
    with pytest.raises(
        DeclarationError, match=r"`base` \(600s\) exceeds `max` \(300s, the default\)"
    ):
        queue("q", retry=Retry(base="10m"))
    with pytest.raises(DeclarationError, match="exceeds the longest hold"):
        queue("q", retry=Retry(backoff="fixed", delay="30d"))
    assert MAX_DELAY < timedelta(days=30)


def test_a_job_must_go_to_one_of_its_plugins_queues_and_names_are_checked_as_the_host_does():
    work = queue("work")
    with pytest.raises(
        DeclarationError,
        match=r"""job "a.B" goes to queue "elsewhere", which is not one of the plugin's queues \("work"\)""",
    ):
        plugin(name="p", queues=[work], jobs=[job("a.B", queue="elsewhere", handler=handler)])
    with pytest.raises(DeclarationError, match="looks like a dead-letter or hold queue name"):
        queue("work.dead")
    with pytest.raises(DeclarationError, match="control characters"):
        job("a\nB", queue=work, handler=handler)
    with pytest.raises(DeclarationError, match="`handler` must be a function"):
        job("a.B", queue=work, handler="nope")
    with pytest.raises(DeclarationError, match="`prefetch` must be between 1 and 65535, got True"):
        queue("q", prefetch=True)
    with pytest.raises(
        DeclarationError, match='`durable=False` does not apply to `queue_type="quorum"`'
    ):
        queue("q", queue_type="quorum", durable=False)


def test_an_async_handler_is_refused_at_declaration():
    async def handle(payload, ctx):
        pass

    with pytest.raises(DeclarationError, match="`async`"):
        job("a.B", queue="work", handler=handle)


def test_a_valid_plugin_keeps_its_declarations():
    work = queue(
        "work",
        retry=Retry(backoff="fixed", delay="2s", max_attempts=5),
        timeout=timedelta(seconds=30),
    )
    declared = plugin(name="p", queues=[work], jobs=[job("a.B", queue=work, handler=handler)])
    assert declared.queues[0].retry == RetryPolicy(5, FixedBackoff(2_000))
    assert declared.queues[0].timeout_ms == 30_000
    assert declared.route("a.B").queue == "work"
    assert declared.route("a.C") is None
