"""Sending through a native test's responder (`TestContext(http=...)`): what reaches the
server, redirects, and how a request that got no response ends the job; the cases of the
Rust SDK's `http` tests."""

import re
from datetime import timedelta

import pytest

from jobhost_sdk import _url, fatal, http, retryable
from jobhost_sdk.http import HttpError, Request, Response
from jobhost_sdk.testing import TestContext


def run(responder, handler):
    """Runs `handler()` against `responder`; its outcome and the requests it sent."""
    done = TestContext(http=responder).run(lambda payload, ctx: handler(), {})
    return done.error, done.requests


def moved(status):
    """A server where `/old` moves to `/new` with `status` and `/new` answers 200."""

    def answer(request):
        if request.url.endswith("/old"):
            return Response(status, {"Location": "/new"})
        return Response(200)

    return answer


def test_a_request_reaches_the_server_as_written():
    error, requests = run(
        lambda request: Response(202),
        lambda: http.post(
            "http://hooks.test/in",
            headers={"X-Signature": "sha256=00"},
            json={"event": "order.created"},
            timeout="3s",
        ).job_result(),
    )
    assert error is None
    [request] = requests
    assert request.method == "POST"
    assert request.url == "http://hooks.test/in"
    assert request.header("x-signature") == "sha256=00", "names ignore case"
    assert request.header("content-type") == "application/json"
    assert request.body == b'{"event":"order.created"}'
    assert request.json() == {"event": "order.created"}
    assert request.timeout == timedelta(seconds=3)


def test_a_response_carries_its_status_headers_and_body():
    answer = Response(200, [("Set-Cookie", "a"), ("set-cookie", "b")], '{"id": 7, "name": "Zoë"}')
    got = None

    def fetch():
        nonlocal got
        got = http.get("http://api.test/orders/7")

    error, _ = run(lambda request: answer, fetch)
    assert error is None
    assert (got.status, got.ok) == (200, True)
    assert got.header("SET-COOKIE") == "a", "the first of a repeated header"
    assert got.headers == [("Set-Cookie", "a"), ("set-cookie", "b")]
    assert got.json() == {"id": 7, "name": "Zoë"}
    assert got.text() == '{"id": 7, "name": "Zoë"}'
    assert got.body == '{"id": 7, "name": "Zoë"}'.encode()


def test_a_response_reports_the_request_it_answers():
    error, _ = run(
        lambda request: Response(404, body="no such order"),
        lambda: http.get("http://api.test/orders/7?key=s3cr3t").job_result(),
    )
    assert error == fatal("GET http://api.test/orders/7 answered 404 Not Found: no such order")


def test_a_redirect_is_the_response_unless_the_request_follows_redirects():
    def fetch():
        response = http.get("http://api.test/old")
        assert response.status == 302
        response.job_result()

    error, requests = run(moved(302), fetch)
    assert error.kind == "fatal", error
    assert len(requests) == 1, "no second request was sent"


def test_each_redirect_followed_is_a_request_of_its_own():
    error, requests = run(
        moved(301),
        lambda: http.get("http://api.test/old", follow_redirects=1).job_result(),
    )
    assert error is None
    assert [r.url for r in requests] == ["http://api.test/old", "http://api.test/new"]


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_303_or_a_moved_post_continues_as_a_get_without_the_body(status):
    error, requests = run(
        moved(status),
        lambda: http.post("http://api.test/old", json=[1, 2], follow_redirects=1).job_result(),
    )
    assert error is None
    assert requests[1].method == "GET"
    assert requests[1].body == b""
    assert requests[1].header("content-type") is None


@pytest.mark.parametrize("status", [307, 308])
def test_a_307_or_308_repeats_the_method_and_the_body(status):
    error, requests = run(
        moved(status),
        lambda: http.put("http://api.test/old", body="v2", follow_redirects=1).job_result(),
    )
    assert error is None
    assert (requests[1].method, requests[1].body) == ("PUT", b"v2")


def test_only_the_safe_headers_follow_a_redirect_to_another_origin():
    def elsewhere(request):
        if request.url == "http://api.test/old":
            return Response(307, {"location": "/same"})
        if request.url == "http://api.test/same":
            return Response(308, {"location": "https://cdn.test/file"})
        return Response(200)

    headers = [
        ("X-Api-Key", "k3y"),
        ("Authorization", "Bearer t0k3n"),
        ("Accept", "text/plain"),
        ("accept-language", "fr"),
        ("User-Agent", "probe/1"),
    ]
    error, requests = run(
        elsewhere,
        lambda: http.get(
            "http://api.test/old", headers=headers, follow_redirects=5
        ).job_result(),
    )
    assert error is None
    assert requests[1].headers == requests[0].headers, "same origin"
    assert requests[2].url == "https://cdn.test/file"
    assert [name for name, _ in requests[2].headers] == ["Accept", "accept-language", "User-Agent"]


@pytest.mark.parametrize("status", [307, 308])
def test_a_body_is_never_resent_to_another_origin(status):
    def moved_away(request):
        if request.url == "http://api.test/in":
            return Response(status, {"location": "http://collector.test/in"})
        return Response(200)

    def send():
        response = http.post("http://api.test/in", json={"card": "4111"}, follow_redirects=5)
        assert response.status == status, "the redirect is the response"
        response.job_result()

    error, requests = run(moved_away, send)
    assert error.kind == "fatal"
    assert len(requests) == 1, "nothing went to the other origin"


def test_redirects_beyond_the_limit_end_at_the_last_redirect():
    error, requests = run(
        lambda request: Response(302, {"location": "/again"}),
        lambda: http.get("http://api.test/start", follow_redirects=2).job_result(),
    )
    assert error.kind == "fatal"
    assert len(requests) == 3, "the first request and two redirects"


def test_a_redirect_to_no_http_url_is_an_invalid_request():
    error, _ = run(
        lambda request: Response(302, {"location": "ftp://files.test/x"}),
        lambda: http.get("http://api.test/", follow_redirects=1).job_result(),
    )
    assert error == fatal(
        "GET http://api.test/ redirected to `ftp://files.test/x`, which is no http(s) URL"
    )


@pytest.mark.parametrize(
    ("kind", "retryable_"),
    [
        ("timeout", True),
        ("connection", True),
        ("other", True),
        ("denied", False),
        ("too_large", False),
        ("invalid", False),
    ],
)
def test_a_request_that_got_no_response_fails_the_job_by_its_kind(kind, retryable_):
    def fail(request):
        raise HttpError(kind, "it went wrong")

    error, _ = run(fail, lambda: http.get("http://api.test/").job_result())
    assert HttpError(kind, "it went wrong").retryable is retryable_
    assert error == (retryable("it went wrong") if retryable_ else fatal("it went wrong"))


def test_a_handler_may_catch_an_http_error_and_decide_itself():
    def fail(request):
        raise HttpError("timeout", "GET http://api.test/ timed out connecting")

    def fetch():
        try:
            http.get("http://api.test/")
        except HttpError as error:
            assert (error.kind, error.retryable) == ("timeout", True)
            raise fatal(f"gave up: {error}") from error

    error, _ = run(fail, fetch)
    assert error == fatal("gave up: GET http://api.test/ timed out connecting")


def test_a_test_without_a_responder_fails_requests_as_not_granted():
    done = TestContext().run(lambda payload, ctx: http.get("http://api.test/"), {})
    assert done.error.kind == "fatal"
    assert "http=" in done.error.message
    assert len(done.requests) == 1, "the request is recorded all the same"


def test_a_request_outside_a_run_is_not_granted():
    with pytest.raises(HttpError) as raised:
        http.get("http://api.test/")
    assert raised.value.kind == "denied"


def test_a_json_body_that_does_not_encode_fails_before_anything_is_sent():
    error, requests = run(
        moved(200), lambda: http.post("http://api.test/in", json={1j: 1}).job_result()
    )
    assert error.kind == "fatal"
    assert error.message.startswith("the JSON body of POST http://api.test/in does not encode")
    assert requests == []
    error, _ = run(moved(200), lambda: http.post("http://api.test/in", json=float("nan")))
    assert error.kind == "fatal", "NaN is not JSON"


def test_arguments_that_are_no_request_raise_at_once():
    with pytest.raises(ValueError, match="an HTTP method is one of"):
        http.request("BREW", "http://api.test/")
    with pytest.raises(TypeError, match="`body` or `json`"):
        http.post("http://api.test/", body=b"x", json={})
    with pytest.raises(ValueError, match="duration"):
        http.get("http://api.test/", timeout=3)


def test_a_body_goes_with_its_length_in_place_of_one_the_request_set():
    request = Request(
        "PUT",
        "http://bucket.test/key?sig=1",
        [("Content-Length", "999"), ("content-type", "text/plain")],
        b"hello",
    )
    assert request.wire_headers() == [("content-type", b"text/plain"), ("content-length", b"5")]
    assert Request("POST", "http://api.test/ping").wire_headers() == [
        ("content-length", b"0")
    ], "a POST without a body says so"
    assert Request("GET", "http://api.test/").wire_headers() == []


def test_a_reason_shows_no_query_fragment_or_user_information():
    request = Request("GET", "https://me:secret@api.example.com/v1/orders?api_key=s3cr3t#x")
    assert request.label == "GET https://api.example.com/v1/orders"
    assert Request("GET", "http://h\n/x").label == r"GET http://h\n/x", "one line"
    assert len(Request("GET", "http://h/" + "a" * 1000).label) < 300


def test_a_method_is_named_in_any_case():
    error, requests = run(lambda request: Response(200), lambda: http.request("patch", "http://a.test/"))
    assert error is None and requests[0].method == "PATCH"


def test_a_url_splits_into_the_parts_wasi_http_takes():
    assert _url.split("https://api.example.com:8443/v1/orders?page=2#top") == _url.Target(
        True, "api.example.com:8443", "/v1/orders?page=2"
    )
    assert _url.split("HTTP://127.0.0.1:7879").path_and_query == "/"
    assert _url.split("http://h?q=1").path_and_query == "/?q=1"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("/v1/orders", "no absolute URL"),
        ("ftp://h/f", "neither `http` nor `https`"),
        ("http:///path", "no host"),
        ("http://me:pw@h/", "user information"),
    ],
)
def test_urls_that_cannot_be_sent_say_why(url, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        _url.split(url)


def test_a_location_resolves_against_the_request_it_answers():
    base = "https://api.example.com/v1/orders/7?full=1"
    for location, expected in [
        ("http://other.example/x", "http://other.example/x"),
        ("//cdn.example/y", "https://cdn.example/y"),
        ("/v2/orders/7", "https://api.example.com/v2/orders/7"),
        ("8", "https://api.example.com/v1/orders/8"),
        ("?full=0", "https://api.example.com/v1/orders/7?full=0"),
    ]:
        assert _url.resolve(base, location) == expected, location
    assert _url.resolve(base, "mailto://x@y") is None, "no http(s) URL"


def test_origins_compare_scheme_and_authority_ignoring_case():
    assert _url.origin("http://H:1/a") == _url.origin("http://h:1/b")
    assert _url.origin("http://h/a") != _url.origin("https://h/a")
    assert _url.origin("http://h/a") != _url.origin("http://h:8080/a")
