//! Test plugin: built against version 0.0.1 of `jobhost:plugin` (its `wit/` is a copy of
//! the contract with only the version changed), so tests can assert that the host refuses
//! a plugin of another contract version with a message that says so. It otherwise has the
//! shape of a real plugin: one queue `test.old`, one job `old-version.Echo` that succeeds.

// The generated export glue is `unsafe` by nature (`export_name`, raw ABI pointers).
#![allow(unsafe_code)]

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::jobhost::plugin::handler::Guest;
use jobhost::plugin::types::{JobConfig, JobContext, JobError, Manifest, QueueConfig};

/// `pub` keeps the handler alive (not dead code) in native builds, which export nothing.
#[derive(Debug)]
pub struct OldPlugin;

impl Guest for OldPlugin {
    fn manifest() -> Manifest {
        Manifest {
            name: "old-version".to_owned(),
            queues: vec![QueueConfig {
                name: "test.old".to_owned(),
                prefetch: 16,
                durable: true,
                max_priority: 10,
                message_ttl: None,
                retry: None,
                timeout: None,
            }],
            jobs: vec![JobConfig {
                name: "old-version.Echo".to_owned(),
                queue: "test.old".to_owned(),
                retry: None,
                timeout: None,
            }],
        }
    }

    fn handle(_context: JobContext, _payload: Vec<u8>) -> Result<(), JobError> {
        Ok(())
    }
}

// The exported symbols are named after the WIT, which native linkers refuse in a cdylib.
#[cfg(target_arch = "wasm32")]
export!(OldPlugin);
