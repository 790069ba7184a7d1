"""pytest runs the email sender's handlers natively, as the Rust example's tests do."""

import json

import pytest

from jobhost_sdk import deferred, fatal, retry_after, retryable
from jobhost_sdk.testing import Response, TestContext

from plugin import FLAKY_SUCCEEDS_ON, GREYLIST, PLUGIN, Email, daily_digest, send_email


def email(to: str) -> Email:
    return Email(to=to, subject="hi", body="hello there")


def test_a_good_address_is_sent_on_the_first_attempt_logged_and_receipted():
    run = TestContext().run(send_email, email("alice@example.com"))
    assert run.error is None
    assert run.messages() == ["email sent"]
    assert run.logs[0].field("to") == "alice@example.com"
    assert run.logs[0].field("bytes") == "11"
    assert [(f.job_type, f.payload) for f in run.follow_ups] == [
        ("email.ReceiptPy", {"to": "alice@example.com", "attempt": 1})
    ]


def test_an_address_without_an_at_sign_is_fatal():
    run = TestContext().run(send_email, email("bob-at-example.com"))
    assert run.error == fatal("invalid address `bob-at-example.com`")
    assert run.follow_ups == [], "nothing was sent"


@pytest.mark.parametrize("attempt", range(1, FLAKY_SUCCEEDS_ON))
def test_a_flaky_address_meets_a_busy_server_before_its_third_attempt(attempt):
    run = TestContext(attempt=attempt, max_attempts=4).run(send_email, email("flaky@example.com"))
    assert run.error == retryable("smtp server busy")
    assert run.messages() == [f"smtp server busy for `flaky@example.com` (attempt {attempt} of 4)"]


def test_a_flaky_address_is_sent_on_its_third_attempt():
    assert (
        TestContext(attempt=FLAKY_SUCCEEDS_ON).run(send_email, email("flaky@example.com")).error
        is None
    )


def test_a_greylisted_address_is_deferred_once_then_sent():
    first = TestContext().run(send_email, email("greylisted@example.com"))
    assert first.error == deferred(GREYLIST, "greylisted by the server of `greylisted@example.com`")
    assert TestContext(deferrals=1).run(send_email, email("greylisted@example.com")).error is None


def test_a_payload_that_is_not_an_email_does_not_decode():
    with pytest.raises(ValueError, match="string fields to, subject, body"):
        Email.from_json({"to": 42})


RELAY = {"relay_url": "http://relay.test/", "relay_token": "t0k3n"}


def test_a_relayed_address_is_posted_to_the_configured_relay_with_its_token():
    relay = TestContext(config=RELAY, http=lambda request: Response(202, body='{"id": "r-1"}'))
    run = relay.run(send_email, email("relayed@example.com"))
    assert run.error is None
    [request] = run.requests
    assert (request.method, request.url) == ("POST", "http://relay.test/send")
    assert request.header("authorization") == "Bearer t0k3n"
    assert request.json() == {"to": "relayed@example.com", "subject": "hi", "body": "hello there"}
    assert run.messages() == ["email relayed", "email sent"]
    assert run.logs[0].field("relay_id") == "r-1"


def test_a_busy_relay_defers_the_email_as_long_as_its_retry_after_asks():
    busy = Response(503, headers={"Retry-After": "1"}, body="relay busy")
    run = TestContext(config=RELAY, http=lambda request: busy).run(
        send_email, email("relayed@example.com")
    )
    assert run.error == retry_after(
        "1s", "POST http://relay.test/send answered 503 Service Unavailable, Retry-After 1s"
    )
    assert run.follow_ups == [], "nothing was sent"


def test_a_relay_that_refuses_the_email_makes_it_fatal_quoting_its_answer():
    refused = Response(422, body='{"error": "no such mailbox"}')
    run = TestContext(config=RELAY, http=lambda request: refused).run(
        send_email, email("relayed@example.com")
    )
    assert run.error == fatal(
        'POST http://relay.test/send answered 422 Unprocessable Content: {"error": "no such mailbox"}'
    )


def test_a_relayed_address_without_a_configured_relay_is_fatal_naming_the_key():
    run = TestContext().run(send_email, email("relayed@example.com"))
    assert run.error.kind == "fatal"
    assert "`relay_url`" in run.error.message
    assert run.requests == []


def test_the_daily_digest_is_scheduled_at_7_in_paris_and_sends_the_team_an_email():
    schedule = PLUGIN.route("email.DailyDigestPy").schedule
    timing = (schedule.timing.expression, schedule.timing.tz, schedule.catch_up)
    assert timing == ("0 7 * * *", "Europe/Paris", 0)
    run = TestContext().run(daily_digest, json.loads(schedule.payload))
    assert run.error is None
    assert [(f.job_type, f.payload["to"], f.payload["subject"]) for f in run.follow_ups] == [
        ("email.SendEmailPy", "team@example.com", "Daily digest")
    ]
