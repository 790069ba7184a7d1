from datetime import timedelta

import pytest

from jobhost_sdk import (
    MAX_DELAY,
    Concurrency,
    DeclarationError,
    Rate,
    Retry,
    Unique,
    job,
    parse_duration,
    plugin,
    queue,
)
from jobhost_sdk._declare import ExponentialBackoff, FixedBackoff, RetryPolicy
from jobhost_sdk._limits import KeyCap, KeyRate, RateLimit, UniqueKey
from jobhost_sdk._schedule import CronTiming, EveryTiming, Schedule


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


def problems_of(declare):
    with pytest.raises(DeclarationError) as refused:
        declare()
    return refused.value.problems


def test_a_queue_declares_a_fleet_wide_cap_and_a_rate_whose_burst_defaults_to_its_count():
    q = queue("q", concurrency=4, rate="50/s", burst=20)
    assert (q.concurrency, q.rate) == (4, RateLimit(50, "second", 20))
    assert queue("q", rate="100000/h").rate == RateLimit(100_000, "hour", 10_000)
    assert queue("q", rate="10/m").rate == RateLimit(10, "minute", 10)
    assert queue("q", rate="1000/s").rate.count == 1_000, "the fastest rate"
    assert (queue("q").concurrency, queue("q").rate) == (None, None)


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"concurrency": 0}, "`concurrency` must be between 1 and 1000, got 0"),
        ({"concurrency": 1001}, "`concurrency` must be between 1 and 1000, got 1001"),
        ({"concurrency": True}, "`concurrency` must be between 1 and 1000, got True"),
        ({"rate": "10"}, '`rate` "10": write it as COUNT/UNIT, e.g. `10/s`, `10/m` or `10/h`'),
        ({"rate": "10/d"}, '`rate` "10/d": the unit must be `s`, `m` or `h`'),
        ({"rate": "0/s"}, '`rate` "0/s": the count must be 1 to 100000'),
        ({"rate": "100001/h"}, '`rate` "100001/h": the count must be 1 to 100000'),
        ({"rate": "1001/s"}, '`rate` "1001/s": at most 1000 jobs a second'),
        ({"rate": "60001/m"}, '`rate` "60001/m": at most 1000 jobs a second'),
        ({"rate": 50}, '`rate` must be a string such as "50/s", got 50'),
        ({"rate": "10/s", "burst": 0}, "`burst` must be between 1 and 10000, got 0"),
        ({"rate": "10/s", "burst": 10_001}, "`burst` must be between 1 and 10000, got 10001"),
        ({"burst": 5}, '`burst` without a `rate`: write `rate="10/s"` too'),
    ],
)
def test_each_bound_of_a_queues_limits_is_refused_saying_why(arguments, why):
    assert problems_of(lambda: queue("q", **arguments)) == [why]


def test_a_job_declares_a_cap_a_rate_and_uniqueness_per_key_of_its_payload():
    j = job(
        "a.B",
        queue="work",
        handler=handler,
        concurrency=Concurrency(key="customer_id", limit=2),
        rate=Rate("10/s", key="customer_id", burst=5, respect_retry_after=True),
        unique=Unique(key="order_id", for_="10m"),
    )
    assert j.concurrency == KeyCap("customer_id", 2)
    assert j.rate == KeyRate("customer_id", RateLimit(10, "second", 5), True)
    assert j.unique == UniqueKey("order_id", 600_000)
    whole = job("a.B", queue="work", handler=handler, rate=Rate("100/m")).rate
    assert whole == KeyRate(None, RateLimit(100, "minute", 100), False), "the job type as a whole"
    assert job("a.B", queue="work", handler=handler, unique=Unique("k", timedelta(hours=1))).unique == UniqueKey("k", 3_600_000)
    plain = job("a.B", queue="work", handler=handler)
    assert (plain.concurrency, plain.rate, plain.unique, plain.schedule) == (None,) * 4


def test_each_bound_of_a_jobs_limits_is_refused_every_problem_in_one_error():
    assert problems_of(
        lambda: job(
            "a.B",
            queue="work",
            handler=handler,
            concurrency=Concurrency(key="", limit=0),
            rate=Rate("10/s", key="a.b", burst=20_000, respect_retry_after=1),
            unique=Unique(key="k" * 65, for_="30d"),
        )
    ) == [
        'concurrency: `key` "": it must be 1 to 64 ASCII letters, digits, `_` or `-`, the name of a top-level payload field',
        "concurrency: `limit` must be between 1 and 1000, got 0",
        'rate: `key` "a.b": it must be 1 to 64 ASCII letters, digits, `_` or `-`, the name of a top-level payload field',
        "rate: `burst` must be between 1 and 10000, got 20000",
        "rate: `respect_retry_after` must be True or False, got 1",
        f'unique: `key` "{"k" * 65}": it must be 1 to 64 ASCII letters, digits, `_` or `-`, the name of a top-level payload field',
        "unique: `for_` of 2592000s is longer than a job can be held, 2147483.647s (about 24.8 days, `MAX_DELAY`)",
    ]
    for arguments, why in [
        ({"concurrency": 2}, '`concurrency` must be a `Concurrency(...)` such as `Concurrency(key="customer_id", limit=2)`, got 2'),
        ({"rate": "10/s"}, '`rate` must be a `Rate(...)` such as `Rate("10/s", key="customer_id")`, got "10/s"'),
        ({"rate": Rate("2000/s")}, 'rate: `limit` "2000/s": at most 1000 jobs a second'),
        ({"unique": Unique("k", "0s")}, "unique: `for_`: zero duration `0s`: a duration must be positive"),
    ]:
        assert problems_of(lambda: job("a.B", queue="work", handler=handler, **arguments)) == [why]


def test_a_job_declares_a_cron_schedule_in_a_time_zone_or_a_period_with_the_derives_defaults():
    daily = job(
        "a.Daily",
        queue="work",
        handler=handler,
        cron="0 7 * * *",
        tz="Europe/Paris",
        payload={"kind": "daily"},
        catch_up=3,
    )
    assert daily.schedule == Schedule(CronTiming("0 7 * * *", "Europe/Paris"), '{"kind": "daily"}', 3)
    every = job("a.Tick", queue="work", handler=handler, every="30s").schedule
    assert every == Schedule(EveryTiming(30_000), "{}", 0)
    utc = job("a.Utc", queue="work", handler=handler, cron="*/5 * * * * *").schedule
    assert utc.timing == CronTiming("*/5 * * * * *", ""), "UTC, as an empty tz"
    assert job("a.T", queue="work", handler=handler, every=timedelta(seconds=1), catch_up=1000).schedule.catch_up == 1000


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"cron": "0 7 * *"}, '`cron` "0 7 * *" has 4 fields: write five (minute hour day-of-month month day-of-week) or six (seconds first)'),
        ({"cron": "0 0 7 * * * *"}, '`cron` "0 0 7 * * * *" has 7 fields: write five (minute hour day-of-month month day-of-week) or six (seconds first)'),
        ({"every": "500ms"}, "`every` must be at least 1s, got 500ms"),
        ({"every": "1m", "tz": "UTC"}, "`tz` applies to `cron` only, not to `every`"),
        ({"every": "1m", "cron": "* * * * *"}, "write one of `cron` and `every`, not both"),
        ({"payload": {}}, '`payload` without a schedule: write `cron="..."` or `every="..."` too'),
        ({"catch_up": 1}, '`catch_up` without a schedule: write `cron="..."` or `every="..."` too'),
        ({"every": "1m", "catch_up": 1001}, "`catch_up` must be between 0 and 1000, got 1001"),
        ({"every": "1m", "catch_up": -1}, "`catch_up` must be between 0 and 1000, got -1"),
        ({"every": "1m", "payload": {"at": {1}}}, "`payload` must be JSON, such as `{\"kind\": \"daily\"}`: Object of type set is not JSON serializable"),
        ({"every": "1m", "payload": "x" * 65_536}, "`payload` is 65538 bytes of JSON; a schedule's payload may have at most 65536"),
        ({"cron": 7}, '`cron` must be a string such as "0 7 * * *", got 7'),
        ({"cron": "0 7 * * *", "tz": 1}, '`tz` must be an IANA time zone name such as "Europe/Paris", got 1'),
    ],
)
def test_a_schedule_that_cannot_be_is_refused_saying_why(arguments, why):
    assert problems_of(lambda: job("a.B", queue="work", handler=handler, **arguments)) == [why]
