//! Sending through a native test's responder: what reaches the server, redirects, and what
//! `?` makes of a request that got no response.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::testing::TestContext;
use crate::testing::tests::Task;
use crate::{JobContext, JobError};

/// Runs `handler` against `responder`, returning its result and the requests it sent.
fn run(
    responder: impl Fn(&Request) -> Result<Response, HttpError> + Send + Sync + 'static,
    handler: impl FnOnce() -> Result<(), JobError>,
) -> (Result<(), JobError>, Vec<Request>) {
    let run = TestContext::new()
        .respond_with(responder)
        .run(|_: Task, _: &JobContext| handler(), Task::default());
    (run.result, run.requests)
}

/// A server where `/old` moves to `/new` with `status` and `/new` answers 200.
fn moved(status: u16) -> impl Fn(&Request) -> Result<Response, HttpError> {
    move |request| {
        Ok(if request.url().ends_with("/old") {
            Response::new(status).with_header("Location", "/new")
        } else {
            Response::new(200)
        })
    }
}

#[test]
fn a_request_reaches_the_server_as_written() {
    let (result, requests) = run(
        |_| Ok(Response::new(202)),
        || {
            post("http://hooks.test/in")
                .header("X-Signature", "sha256=00")
                .json(&serde_json::json!({"event": "order.created"}))
                .timeout(Duration::from_secs(3))
                .send()?
                .job_result()
        },
    );
    assert_eq!(result, Ok(()));
    let [request] = requests.as_slice() else {
        panic!("one request, not {requests:?}");
    };
    assert_eq!(request.method(), Method::Post);
    assert_eq!(request.url(), "http://hooks.test/in");
    assert_eq!(
        request.header("x-signature"),
        Some("sha256=00"),
        "names ignore case"
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.body(), br#"{"event":"order.created"}"#);
    assert_eq!(request.timeout(), Some(Duration::from_secs(3)));
}

#[test]
fn a_response_reports_the_request_it_answers() {
    let (result, _) = run(
        |_| Ok(Response::new(404).with_body("no such order")),
        || {
            get("http://api.test/orders/7?key=s3cr3t")
                .send()?
                .job_result()
        },
    );
    assert_eq!(
        result,
        Err(JobError::fatal(
            "GET http://api.test/orders/7 answered 404 Not Found: no such order"
        ))
    );
}

#[test]
fn a_redirect_is_the_response_unless_the_request_follows_redirects() {
    let (result, requests) = run(moved(302), || {
        let response = get("http://api.test/old").send()?;
        assert_eq!(response.status(), 302);
        response.job_result()
    });
    assert!(matches!(result, Err(JobError::Fatal(_))), "{result:?}");
    assert_eq!(requests.len(), 1, "no second request was sent");
}

#[test]
fn each_redirect_followed_is_a_request_of_its_own() {
    let (result, requests) = run(moved(301), || {
        get("http://api.test/old")
            .follow_redirects(1)
            .send()?
            .job_result()
    });
    assert_eq!(result, Ok(()));
    let urls: Vec<&str> = requests.iter().map(Request::url).collect();
    assert_eq!(urls, ["http://api.test/old", "http://api.test/new"]);
}

#[test]
fn a_303_or_a_moved_post_continues_as_a_get_without_the_body() {
    for status in [301, 302, 303] {
        let (result, requests) = run(moved(status), || {
            post("http://api.test/old")
                .json(&[1, 2])
                .follow_redirects(1)
                .send()?
                .job_result()
        });
        assert_eq!(result, Ok(()));
        assert_eq!(requests[1].method(), Method::Get, "{status}");
        assert!(requests[1].body().is_empty(), "{status}");
        assert_eq!(requests[1].header("content-type"), None, "{status}");
    }
}

#[test]
fn a_307_or_308_repeats_the_method_and_the_body() {
    for status in [307, 308] {
        let (result, requests) = run(moved(status), || {
            put("http://api.test/old")
                .body("v2")
                .follow_redirects(1)
                .send()?
                .job_result()
        });
        assert_eq!(result, Ok(()));
        assert_eq!(requests[1].method(), Method::Put, "{status}");
        assert_eq!(requests[1].body(), b"v2", "{status}");
    }
}

#[test]
fn only_the_safe_headers_follow_a_redirect_to_another_origin() {
    let elsewhere = |request: &Request| {
        Ok(match request.url() {
            "http://api.test/old" => Response::new(307).with_header("location", "/same"),
            "http://api.test/same" => {
                Response::new(308).with_header("location", "https://cdn.test/file")
            }
            _ => Response::new(200),
        })
    };
    let (result, requests) = run(elsewhere, || {
        get("http://api.test/old")
            .header("X-Api-Key", "k3y")
            .header("X-Signature", "sha256=00")
            .header("Accept", "text/plain")
            .header("accept-language", "fr")
            .header("User-Agent", "probe/1")
            .follow_redirects(5)
            .send()?
            .job_result()
    });
    assert_eq!(result, Ok(()));
    assert_eq!(requests[1].headers(), requests[0].headers(), "same origin");
    assert_eq!(requests[2].url(), "https://cdn.test/file");
    let carried: Vec<&str> = requests[2]
        .headers()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        carried,
        ["Accept", "accept-language", "User-Agent"],
        "another origin"
    );
}

#[test]
fn a_body_is_never_resent_to_another_origin() {
    for status in [307, 308] {
        let moved_away = move |request: &Request| {
            Ok(if request.url() == "http://api.test/in" {
                Response::new(status).with_header("location", "http://collector.test/in")
            } else {
                Response::new(200)
            })
        };
        let (result, requests) = run(moved_away, || {
            let response = post("http://api.test/in")
                .json(&serde_json::json!({"card": "4111"}))
                .follow_redirects(5)
                .send()?;
            assert_eq!(response.status(), status, "the redirect is the response");
            response.job_result()
        });
        assert!(matches!(result, Err(JobError::Fatal(_))), "{result:?}");
        assert_eq!(
            requests.len(),
            1,
            "{status}: nothing went to the other origin"
        );
    }
}

#[test]
fn credentials_follow_a_redirect_only_within_the_origin() {
    let elsewhere = |request: &Request| {
        Ok(match request.url() {
            "http://api.test/old" => Response::new(302).with_header("location", "/same"),
            "http://api.test/same" => {
                Response::new(302).with_header("location", "https://cdn.test/file")
            }
            _ => Response::new(200),
        })
    };
    let (result, requests) = run(elsewhere, || {
        get("http://api.test/old")
            .header("Authorization", "Bearer t0k3n")
            .header("Accept", "text/plain")
            .follow_redirects(5)
            .send()?
            .job_result()
    });
    assert_eq!(result, Ok(()));
    assert_eq!(requests[1].header("authorization"), Some("Bearer t0k3n"));
    assert_eq!(requests[2].url(), "https://cdn.test/file");
    assert_eq!(requests[2].header("authorization"), None, "another origin");
    assert_eq!(requests[2].header("accept"), Some("text/plain"));
}

#[test]
fn redirects_beyond_the_limit_end_at_the_last_redirect() {
    let endless = |_: &Request| Ok(Response::new(302).with_header("location", "/again"));
    let (result, requests) = run(endless, || {
        get("http://api.test/start")
            .follow_redirects(2)
            .send()?
            .job_result()
    });
    assert!(matches!(result, Err(JobError::Fatal(_))), "{result:?}");
    assert_eq!(requests.len(), 3, "the first request and two redirects");
}

#[test]
fn a_request_that_got_no_response_fails_the_job_by_its_kind() {
    for (kind, retryable) in [
        (HttpErrorKind::Timeout, true),
        (HttpErrorKind::Connection, true),
        (HttpErrorKind::Other, true),
        (HttpErrorKind::Denied, false),
        (HttpErrorKind::TooLarge, false),
        (HttpErrorKind::Invalid, false),
    ] {
        let (result, _) = run(
            move |_| Err(HttpError::new(kind, "it went wrong")),
            || get("http://api.test/").send()?.job_result(),
        );
        let expected = if retryable {
            JobError::retryable("it went wrong")
        } else {
            JobError::fatal("it went wrong")
        };
        assert_eq!(result, Err(expected), "{kind:?}");
    }
}

#[test]
fn a_test_without_a_responder_fails_requests_as_not_granted() {
    let run = TestContext::new().run(
        |_: Task, _: &JobContext| get("http://api.test/").send()?.job_result(),
        Task::default(),
    );
    assert!(
        matches!(&run.result, Err(JobError::Fatal(msg)) if msg.contains("respond_with")),
        "{:?}",
        run.result
    );
    assert_eq!(
        run.requests.len(),
        1,
        "the request is recorded all the same"
    );
}

#[test]
fn a_json_body_that_does_not_encode_fails_before_anything_is_sent() {
    let unencodable: BTreeMap<Vec<u8>, u8> = BTreeMap::from([(vec![1], 1)]);
    let (result, requests) = run(moved(200), || {
        post("http://api.test/in")
            .json(&unencodable)
            .send()?
            .job_result()
    });
    assert!(
        matches!(&result, Err(JobError::Fatal(msg)) if msg.starts_with("the JSON body of POST http://api.test/in does not encode")),
        "{result:?}"
    );
    assert!(requests.is_empty());
}

#[test]
fn a_redirect_to_no_http_url_is_an_invalid_request() {
    let to_ftp = |_: &Request| Ok(Response::new(302).with_header("location", "ftp://files.test/x"));
    let (result, _) = run(to_ftp, || {
        get("http://api.test/")
            .follow_redirects(1)
            .send()?
            .job_result()
    });
    assert_eq!(
        result,
        Err(JobError::fatal(
            "GET http://api.test/ redirected to `ftp://files.test/x`, which is no http(s) URL"
        ))
    );
}

#[test]
fn a_body_goes_with_its_length_in_place_of_one_the_request_set() {
    let request = put("http://bucket.test/key?sig=1")
        .header("Content-Length", "999")
        .header("content-type", "text/plain")
        .body("hello")
        .request;
    assert_eq!(
        request.wire_headers(),
        [
            ("content-type".to_owned(), b"text/plain".to_vec()),
            ("content-length".to_owned(), b"5".to_vec()),
        ]
    );
    let empty_post = post("http://api.test/ping").request;
    assert_eq!(
        empty_post.wire_headers(),
        [("content-length".to_owned(), b"0".to_vec())],
        "a POST without a body says so"
    );
    assert!(get("http://api.test/").request.wire_headers().is_empty());
}
