//! The `hostcalls` and `httpflood` fixtures' floods and the reasons they crash with.

use jobhost::job::Outcome;

use super::{invocation, load};

const FLOOD: &str = "hostcalls.Flood";

/// Each flood mode of the `hostcalls` fixture and the start of the reason its attempt
/// crashes with, under the default [`HostCallBudget`](jobhost::plugin::HostCallBudget).
pub const FLOODS: &[(&str, &str)] = &[
    (
        "job-type",
        "host-call budget exceeded: a follow-up job type of 8388608 bytes, more than 255",
    ),
    (
        "follow-ups",
        "host-call budget exceeded: more than 1000 follow-ups in one job",
    ),
    (
        "payload-bytes",
        "host-call budget exceeded: more than 16777216 bytes of follow-up payloads in one job",
    ),
    (
        "log-message",
        "host-call budget exceeded: more than 1048576 bytes of log output in one job",
    ),
    (
        "log-fields",
        "host-call budget exceeded: a log call with 100000 fields, more than 64",
    ),
    (
        "log-calls",
        "host-call budget exceeded: more than 100000 host calls in one job",
    ),
    (
        "stdout",
        "host-call budget exceeded: more than 1048576 bytes of log output in one job",
    ),
    (
        "panic",
        "host-call budget exceeded: a panic message of 16777216 bytes, more than 4096; it starts: ppp",
    ),
];

/// Run `mode` of the flood job once.
pub async fn flood(mode: &str) -> Outcome {
    let payload = format!("{mode:?}");
    load("hostcalls")
        .await
        .invoke(invocation(FLOOD, payload.as_bytes()))
        .await
}

const HTTP_FLOOD: &str = "httpflood.Flood";

/// Each flood mode of the `httpflood` fixture (raw `wasi:http` calls) and the start of
/// the reason its attempt crashes with, under the default
/// [`HostCallBudget`](jobhost::plugin::HostCallBudget).
pub const HTTP_FLOODS: &[(&str, &str)] = &[
    (
        "method",
        "host-call budget exceeded: a wasi:http method of 1048576 bytes, more than 64",
    ),
    (
        "authority",
        "host-call budget exceeded: a wasi:http authority of 1048576 bytes, more than 1024",
    ),
    (
        "path",
        "host-call budget exceeded: a wasi:http path with query of 1048576 bytes, more than 16384",
    ),
    (
        "header",
        "host-call budget exceeded: a wasi:http header value of 1048576 bytes, more than 16384",
    ),
    (
        "fields",
        "host-call budget exceeded: more than 16777216 bytes handed to wasi:http in one job",
    ),
    (
        "resources",
        "host-call budget exceeded: more than 1024 resources held at once",
    ),
    (
        "bodies",
        "host-call budget exceeded: more than 1024 resources held at once",
    ),
    (
        "calls",
        "host-call budget exceeded: more than 100000 host calls in one job",
    ),
];

/// Run `mode` of the `wasi:http` flood job once.
pub async fn http_flood(mode: &str) -> Outcome {
    let payload = format!(r#"{{"mode":"{mode}"}}"#);
    load("httpflood")
        .await
        .invoke(invocation(HTTP_FLOOD, payload.as_bytes()))
        .await
}
