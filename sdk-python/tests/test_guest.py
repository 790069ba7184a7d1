"""The component side (`jobhost_sdk.guest`) natively, over the bindings componentize-py
generates for the repository's WIT: the host's imports are replaced by recorders, so the
shapes the component passes (dataclass fields, variant cases, `Err`) are checked here and
not only end to end (host/tests/cli/cli_python.rs)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobhost_sdk import Retry, build, deferred, fatal, job, plugin, queue

WIT = Path(__file__).resolve().parents[2] / "wit"


@pytest.fixture(scope="module")
def bindings(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings")
    componentize = Path(sys.executable).with_name("componentize-py")
    subprocess.run(
        [componentize, *build.wit_options(WIT), "bindings", out], check=True, capture_output=True
    )
    sys.path.insert(0, str(out))
    from componentize_py_types import Err
    from wit_world.imports import host, types

    import jobhost_sdk.guest as guest

    yield guest, host, types, Err
    sys.path.remove(str(out))


@pytest.fixture
def calls(bindings, monkeypatch):
    _, host, _, Err = bindings
    recorded = []

    def enqueue(job_type, payload, delay):
        recorded.append(("enqueue", job_type, payload, delay))
        if job_type == "a.Refused":
            raise Err("unknown job type `a.Refused`")
        return "job-2"

    monkeypatch.setattr(host, "log", lambda *args: recorded.append(("log", *args)))
    monkeypatch.setattr(host, "report_panic", lambda *args: recorded.append(("panic", *args)))
    monkeypatch.setattr(host, "enqueue", enqueue)
    return recorded


def send(payload, ctx):
    if payload["to"] == "exit":
        raise SystemExit(3)
    if payload["to"] == "later":
        raise deferred("1500ms", "greylisted")
    if payload["to"] == "nobody":
        raise fatal("invalid address")
    ctx.info("sent", to=payload["to"])
    ctx.enqueue("a.Receipt", {"to": payload["to"]}, delay="250ms")
    if payload["to"] == "refused":
        ctx.enqueue("a.Refused", {})


WORK = queue("work", retry=Retry(max_attempts=4, base="1s", max="8s"), timeout="30s")
PLUGIN = plugin(
    name="p",
    queues=[WORK, queue("slow", queue_type="quorum", retry=Retry(backoff="fixed", delay="2s"))],
    jobs=[
        job("a.Send", queue=WORK, handler=send),
        job("a.Receipt", queue="slow", handler=lambda p, c: None),
    ],
)


def delivery(types, job_type):
    return types.JobContext("id-1", job_type, "work", 1, 4, 0, 0, 5)


def payload(value):
    return json.dumps(value).encode()


def test_the_manifest_carries_the_declarations_in_the_wits_shapes(bindings):
    guest, _, types, _ = bindings
    manifest = guest.serve(PLUGIN)().manifest()
    assert manifest.queues[0].retry == types.RetryPolicy(
        4, types.Backoff_Exponential(types.ExponentialBackoff(1_000, 2.0, 8_000, True))
    )
    assert manifest.queues[1].retry == types.RetryPolicy(3, types.Backoff_Fixed(2_000))
    assert manifest.queues[0].timeout == 30_000
    assert (manifest.queues[0].queue_type, manifest.queues[1].queue_type) == (
        types.QueueType.CLASSIC,
        types.QueueType.QUORUM,
    )
    assert [(j.name, j.queue, j.retry, j.schedule) for j in manifest.jobs] == [
        ("a.Send", "work", None, None),
        ("a.Receipt", "slow", None, None),
    ]


def test_a_completed_job_logs_and_enqueues_through_the_hosts_imports(bindings, calls):
    guest, _, types, _ = bindings
    guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "a@b"}))
    assert calls == [
        ("log", types.Level.INFO, "sent", [("to", "a@b")]),
        ("enqueue", "a.Receipt", b'{"to": "a@b"}', 250),
    ]


def test_job_errors_cross_as_the_wits_variant_cases(bindings, calls):
    guest, _, types, Err = bindings
    handler = guest.serve(PLUGIN)()
    outcomes = {}
    for to in ["later", "nobody"]:
        with pytest.raises(Err) as raised:
            handler.handle(delivery(types, "a.Send"), payload({"to": to}))
        outcomes[to] = raised.value.value
    assert outcomes["later"] == types.JobError_Deferred(types.Deferral(1_500, "greylisted", False))
    assert outcomes["nobody"] == types.JobError_Fatal("invalid address")
    with pytest.raises(Err) as raised:
        handler.handle(delivery(types, "a.Send"), b"{not json")
    assert isinstance(raised.value.value, types.JobError_Decode)
    with pytest.raises(Err) as raised:
        handler.handle(delivery(types, "a.Other"), payload({}))
    assert raised.value.value == types.JobError_Fatal(
        "plugin has no handler for job type `a.Other` (it handles: a.Send, a.Receipt)"
    )


def test_a_follow_up_the_host_refuses_is_an_enqueue_error_the_handler_sees(bindings, calls):
    guest, _, types, Err = bindings
    with pytest.raises(Err) as raised:
        guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "refused"}))
    assert raised.value.value == types.JobError_Retryable(
        "uncaught EnqueueError: unknown job type `a.Refused`"
    )


def test_what_escapes_the_handler_as_a_base_exception_is_reported_before_the_trap(bindings, calls):
    guest, _, types, _ = bindings
    with pytest.raises(SystemExit):
        guest.serve(PLUGIN)().handle(delivery(types, "a.Send"), payload({"to": "exit"}))
    assert calls == [("panic", "uncaught SystemExit: 3")]
