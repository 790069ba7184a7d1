use std::time::{Duration, SystemTime};

use super::*;

/// Thu, 03 Dec 2026 12:00:00 GMT: the clock HTTP-date `Retry-After` values are read against.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_299_200)
}

/// A response to `GET http://api.test/v1/orders?key=s3cr3t` with `status`.
fn response(status: u16) -> Response {
    let request = super::super::get("http://api.test/v1/orders?key=s3cr3t").request;
    Response::new(status).answering(&request)
}

fn result(response: &Response) -> Result<(), JobError> {
    job_result(response, now())
}

#[test]
fn every_2xx_is_success() {
    for status in [200, 201, 204, 299] {
        assert_eq!(result(&response(status)), Ok(()), "{status}");
    }
}

#[test]
fn a_429_with_retry_after_in_seconds_defers_for_exactly_that_long() {
    let answer = response(429).with_header("Retry-After", "7");
    assert_eq!(
        result(&answer),
        Err(JobError::retry_after(
            Duration::from_secs(7),
            "GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After 7s"
        )),
        "the reason names the request without its query, which may hold a key; the wait is \
         marked as the service's"
    );
}

#[test]
fn a_503_with_retry_after_as_an_http_date_defers_until_that_date() {
    let answer = response(503).with_header("retry-after", "Thu, 03 Dec 2026 12:01:30 GMT");
    assert!(
        matches!(result(&answer), Err(JobError::Deferred { delay, .. }) if delay == Duration::from_secs(90)),
        "{:?}",
        result(&answer)
    );
    let past = response(503).with_header("retry-after", "Wed, 02 Dec 2026 12:00:00 GMT");
    assert!(
        matches!(result(&past), Err(JobError::Deferred { delay, .. }) if delay.is_zero()),
        "a date already past asks for no wait: {:?}",
        result(&past)
    );
}

#[test]
fn a_retry_after_beyond_the_longest_hold_is_capped_and_the_reason_says_so() {
    for asked in ["3000000", "99999999999999999999999"] {
        let answer = response(429).with_header("retry-after", asked);
        match result(&answer) {
            Err(JobError::Deferred {
                delay,
                reason,
                retry_after: true,
            }) => {
                assert_eq!(delay, MAX_DELAY, "{asked}");
                assert!(
                    reason.contains("capped at the longest hold of 2147483.647s"),
                    "{reason}"
                );
            }
            other => panic!("a capped deferral for {asked}, not {other:?}"),
        }
    }
}

#[test]
fn a_429_or_503_without_a_usable_retry_after_is_retryable() {
    for (status, header) in [
        (429, None),
        (503, None),
        (429, Some("soon")),
        (503, Some("1.5")),
        (429, Some("-1")),
        (503, Some("")),
    ] {
        let mut answer = response(status).with_body("busy");
        if let Some(value) = header {
            answer = answer.with_header("retry-after", value);
        }
        match result(&answer) {
            Err(JobError::Retryable(reason)) => assert!(
                reason.ends_with("without a usable Retry-After: busy"),
                "{status} {header:?}: {reason}"
            ),
            other => panic!("{status} {header:?} is retryable, not {other:?}"),
        }
    }
}

#[test]
fn any_other_5xx_is_retryable_with_the_status_and_the_body() {
    assert_eq!(
        result(&response(500).with_body("database is down\n")),
        Err(JobError::retryable(
            "GET http://api.test/v1/orders answered 500 Internal Server Error: database is down"
        ))
    );
    for status in [502, 504, 599] {
        assert!(
            matches!(result(&response(status)), Err(JobError::Retryable(_))),
            "{status}"
        );
    }
}

#[test]
fn a_retry_after_on_another_5xx_does_not_defer() {
    let answer = response(500).with_header("retry-after", "5");
    assert!(matches!(result(&answer), Err(JobError::Retryable(_))));
}

#[test]
fn any_other_4xx_is_fatal_with_the_status_and_the_body() {
    assert_eq!(
        result(&response(422).with_body(r#"{"error":"unknown customer"}"#)),
        Err(JobError::fatal(
            "GET http://api.test/v1/orders answered 422 Unprocessable Content: \
             {\"error\":\"unknown customer\"}"
        ))
    );
    for status in [400, 401, 403, 404, 408, 499] {
        assert!(
            matches!(result(&response(status)), Err(JobError::Fatal(_))),
            "{status}"
        );
    }
    assert_eq!(
        result(&response(404)),
        Err(JobError::fatal(
            "GET http://api.test/v1/orders answered 404 Not Found"
        )),
        "no body, no excerpt"
    );
}

#[test]
fn a_redirect_not_followed_is_fatal_and_names_where_it_leads() {
    let answer = response(301).with_header("location", "https://api.test/v2/orders");
    assert_eq!(
        result(&answer),
        Err(JobError::fatal(
            "GET http://api.test/v1/orders answered 301 Moved Permanently, a redirect to \
             `https://api.test/v2/orders` the request does not follow (see `follow_redirects`)"
        ))
    );
    assert!(matches!(result(&response(100)), Err(JobError::Fatal(_))));
}

#[test]
fn the_body_excerpt_is_bounded_and_one_line() {
    let body = format!("line one\nline\u{1b}[31m two\r\n{}", "x".repeat(10_000));
    let Err(JobError::Fatal(reason)) = result(&response(400).with_body(body.clone())) else {
        panic!("400 is fatal");
    };
    assert!(reason.len() < 700, "{} bytes: {reason}", reason.len());
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    assert!(
        reason.contains(r"line one\nline\u{1b}[31m two\r\n"),
        "{reason}"
    );
    assert!(
        reason.ends_with(&format!("… ({} bytes in all)", body.len())),
        "{reason}"
    );
}

#[test]
fn a_body_that_is_not_utf8_is_quoted_lossily() {
    assert_eq!(excerpt(b"caf\xe9 \xff"), "caf\u{fffd} \u{fffd}");
}
