"""What a response means for the job (`Response.job_result`): the cases of the Rust SDK's
`http::outcome` tests, with the same reasons, and the `Retry-After` values it reads."""

import pytest

from jobhost_sdk import JobError, fatal, retryable
from jobhost_sdk.http import Request, Response, outcome, retry_after_ms

# Thu, 03 Dec 2026 12:00:00 GMT: the clock HTTP-date `Retry-After` values are read against.
NOW = 1_796_299_200
MAX_DELAY_MS = 2**31 - 1


def response(status, headers=None, body=b""):
    """A response to `GET http://api.test/v1/orders?key=s3cr3t` with `status`."""
    label = Request("GET", "http://api.test/v1/orders?key=s3cr3t").label
    return Response(status, headers, body, _label=label)


def result(answer):
    return outcome(answer, NOW)


def deferral(ms, reason):
    return JobError("deferred", reason, delay_ms=ms, retry_after=True)


def test_every_2xx_is_success():
    for status in [200, 201, 204, 299]:
        assert result(response(status)) is None, status


def test_job_result_returns_for_a_2xx_and_raises_the_outcome_otherwise():
    response(204).job_result()
    with pytest.raises(JobError) as raised:
        response(404).job_result()
    assert raised.value == fatal("GET http://api.test/v1/orders answered 404 Not Found")


def test_a_429_with_retry_after_in_seconds_defers_for_exactly_that_long():
    # The reason names the request without its query, which may hold a key; the wait is
    # marked as the service's.
    assert result(response(429, {"Retry-After": "7"})) == deferral(
        7_000, "GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After 7s"
    )


def test_a_503_with_retry_after_as_an_http_date_defers_until_that_date():
    answer = result(response(503, {"retry-after": "Thu, 03 Dec 2026 12:01:30 GMT"}))
    assert (answer.kind, answer.delay_ms, answer.retry_after) == ("deferred", 90_000, True)
    past = result(response(503, {"retry-after": "Wed, 02 Dec 2026 12:00:00 GMT"}))
    assert (past.kind, past.delay_ms) == ("deferred", 0), "a date already past asks for no wait"
    assert past.message.endswith("Retry-After 0ns"), "worded as the Rust SDK words it"


def test_a_retry_after_beyond_the_longest_hold_is_capped_and_the_reason_says_so():
    for asked, seconds in [("3000000", 3_000_000), ("99999999999999999999999", 2**64 - 1)]:
        answer = result(response(429, {"retry-after": asked}))
        assert (answer.kind, answer.delay_ms, answer.retry_after) == ("deferred", MAX_DELAY_MS, True)
        assert answer.message == (
            f"GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After "
            f"{seconds}s, capped at the longest hold of 2147483.647s"
        )


def test_a_429_or_503_without_a_usable_retry_after_is_retryable():
    for status, header in [
        (429, None),
        (503, None),
        (429, "soon"),
        (503, "1.5"),
        (429, "-1"),
        (503, ""),
        (429, "٣"),  # a digit, but not an ASCII one
        (503, "Fri, 03 Dec 2026 12:01:30 GMT"),  # the 3rd is a Thursday
    ]:
        headers = None if header is None else {"retry-after": header}
        answer = result(response(status, headers, b"busy"))
        assert answer.kind == "retryable", (status, header)
        assert answer.message.endswith("without a usable Retry-After: busy"), (status, header)


def test_any_other_5xx_is_retryable_with_the_status_and_the_body():
    assert result(response(500, body=b"database is down\n")) == retryable(
        "GET http://api.test/v1/orders answered 500 Internal Server Error: database is down"
    )
    for status in [502, 504, 599]:
        assert result(response(status)).kind == "retryable", status


def test_a_retry_after_on_another_5xx_does_not_defer():
    assert result(response(500, {"retry-after": "5"})).kind == "retryable"


def test_any_other_4xx_is_fatal_with_the_status_and_the_body():
    assert result(response(422, body=b'{"error":"unknown customer"}')) == fatal(
        'GET http://api.test/v1/orders answered 422 Unprocessable Content: {"error":"unknown customer"}'
    )
    for status in [400, 401, 403, 404, 408, 499]:
        assert result(response(status)).kind == "fatal", status
    assert result(response(404)) == fatal(
        "GET http://api.test/v1/orders answered 404 Not Found"
    ), "no body, no excerpt"


def test_a_redirect_not_followed_is_fatal_and_names_where_it_leads():
    assert result(response(301, {"location": "https://api.test/v2/orders"})) == fatal(
        "GET http://api.test/v1/orders answered 301 Moved Permanently, a redirect to "
        "`https://api.test/v2/orders` the request does not follow (see `follow_redirects`)"
    )
    assert result(response(100)).kind == "fatal"


def test_the_body_excerpt_is_bounded_and_one_line():
    body = ("line one\nline\x1b[31m two\r\n" + "x" * 10_000).encode()
    reason = result(response(400, body=body)).message
    assert len(reason.encode()) < 700, reason
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in reason), repr(reason)
    assert r"line one\nline\u{1b}[31m two\r\n" in reason
    assert reason.endswith(f"… ({len(body)} bytes in all)")


def test_a_body_that_is_not_utf8_is_quoted_lossily():
    assert result(response(400, body=b"caf\xe9 \xff")).message.endswith(": caf\ufffd \ufffd")


def test_characters_that_reorder_or_hide_text_are_escaped_in_a_reason():
    reason = result(response(400, body="evil\u202etxt.exe\u200b\u2028".encode())).message
    assert reason.endswith(r"evil\u{202e}txt.exe\u{200b}\u{2028}"), reason
    kept = result(response(400, body="\u200d\u00e9".encode())).message
    assert kept.endswith("\u200d\u00e9"), "a joiner reorders nothing"


def test_a_hostile_location_is_bounded_and_one_line():
    reason = result(response(302, {"location": "http://x/\n" + "a" * 5_000})).message
    assert "\n" not in reason and len(reason) < 500, reason


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("0", 0),
        ("  12 ", 12_000),
        ("Thu, 03 Dec 2026 12:00:10 GMT", 10_000),
        ("Thursday, 03-Dec-26 12:00:10 GMT", 10_000),
        ("Thu Dec  3 12:00:10 2026", 10_000),
        ("Thu, 03 Dec 2026 11:00:00 GMT", 0),
        ("1.5", None),
        ("+3", None),
        ("Thu, 3 Dec 2026 12:00:10 GMT", None),
        ("Thu, 03 Dec 2026 12:00:10 UTC", None),
        ("Thu, 31 Feb 2026 12:00:10 GMT", None),
        ("Thu, 03 Dec 2026 24:00:00 GMT", None),
        ("thu, 03 dec 2026 12:00:10 gmt", None),
        ("x" * 10_000, None),
    ],
)
def test_retry_after_reads_delta_seconds_and_the_three_http_date_forms(value, ms):
    assert retry_after_ms(value, NOW) == ms
