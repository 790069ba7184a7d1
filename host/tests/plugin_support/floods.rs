//! The `hostcalls` fixture's floods and the reasons they crash with.

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
