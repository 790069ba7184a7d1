//! Test plugin: `hostcalls.Flood` on queue `test.hostcalls` hands the host far more than a
//! job's host-call budget allows, in the way its payload (a JSON string) names, so tests
//! can assert that each flood costs one attempt and the host's memory stays bounded:
//!
//! | payload | what the job does |
//! |---|---|
//! | `"job-type"` | enqueues a follow-up whose job type is 8 MiB long |
//! | `"follow-ups"` | enqueues a million tiny follow-ups |
//! | `"payload-bytes"` | enqueues follow-ups of 4 MiB payloads, 8 of them |
//! | `"log-message"` | logs one 16 MiB message |
//! | `"log-fields"` | logs one message with 100,000 fields |
//! | `"log-calls"` | logs one short message a million times |
//! | `"stdout"` | prints a line to stdout a million times |
//! | `"panic"` | reports a 16 MiB panic message, then aborts |
//! | `"error"` | returns a retryable error with a 4 MiB message |
//! | `"ok"` | logs, enqueues one follow-up and succeeds |
//!
//! Every string fits a 32 MiB memory cap. A flood that the host lets through ends in a
//! fatal error saying so. It uses wit-bindgen directly, so it can pass the imports what
//! the SDK never would.

// The generated export glue is `unsafe` by nature (`export_name`, raw ABI pointers).
#![allow(unsafe_code)]

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use exports::jobhost::plugin::handler::Guest;
use jobhost::plugin::host::{enqueue, log, report_panic};
use jobhost::plugin::types::{
    JobConfig, JobContext, JobError, Level, Manifest, QueueConfig, QueueType,
};

const MIB: usize = 1024 * 1024;

/// `pub` keeps the handler alive (not dead code) in native builds, which export nothing.
#[derive(Debug)]
pub struct Hostcalls;

impl Guest for Hostcalls {
    fn manifest() -> Manifest {
        Manifest {
            name: "hostcalls".to_owned(),
            queues: vec![QueueConfig {
                name: "test.hostcalls".to_owned(),
                prefetch: 16,
                durable: true,
                queue_type: QueueType::Classic,
                max_priority: 10,
                message_ttl: None,
                retry: None,
                timeout: None,
                concurrency: None,
                rate: None,
            }],
            jobs: vec![JobConfig {
                name: "hostcalls.Flood".to_owned(),
                queue: "test.hostcalls".to_owned(),
                retry: None,
                timeout: None,
                concurrency: None,
                rate: None,
                unique: None,
                schedule: None,
            }],
        }
    }

    fn handle(_context: JobContext, payload: Vec<u8>) -> Result<(), JobError> {
        let mode = String::from_utf8_lossy(&payload);
        match mode.trim().trim_matches('"') {
            "job-type" => drop(enqueue(&"x".repeat(8 * MIB), b"{}", None)),
            "follow-ups" => {
                for _ in 0..1_000_000 {
                    drop(enqueue("hostcalls.Tiny", b"{}", None));
                }
            }
            "payload-bytes" => {
                let payload = format!("\"{}\"", "x".repeat(4 * MIB));
                for _ in 0..8 {
                    drop(enqueue("hostcalls.Big", payload.as_bytes(), None));
                }
            }
            "log-message" => log(Level::Info, &"x".repeat(16 * MIB), &[]),
            "log-fields" => {
                let fields = vec![(String::new(), String::new()); 100_000];
                log(Level::Info, "fields", &fields);
            }
            "log-calls" => {
                for _ in 0..1_000_000 {
                    log(Level::Info, "x", &[]);
                }
            }
            "stdout" => {
                for line in 0..1_000_000 {
                    println!("stdout line {line}");
                }
            }
            "panic" => {
                report_panic(&"p".repeat(16 * MIB));
                std::process::abort();
            }
            "error" => return Err(JobError::Retryable("e".repeat(4 * MIB))),
            "ok" => {
                log(
                    Level::Info,
                    "one\nline",
                    &[("key".to_owned(), "va\u{1b}lue".to_owned())],
                );
                enqueue("hostcalls.Next", b"{}", None).map_err(JobError::Fatal)?;
                return Ok(());
            }
            other => return Err(JobError::Fatal(format!("unknown mode {other}"))),
        }
        Err(JobError::Fatal("the host let the flood through".to_owned()))
    }
}

// The exported symbols are named after the WIT, which native linkers refuse in a cdylib.
#[cfg(target_arch = "wasm32")]
export!(Hostcalls);
