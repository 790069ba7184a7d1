//! Test plugin: its `manifest` never returns. By default it spins, which the epoch
//! deadline stops; with feature `sleep` (fixture `slow-manifest-sleep`) it blocks in a WASI
//! sleep, a host call that epochs cannot interrupt. Tests assert that the host refuses it
//! within the load deadline while other plugins load and serve.

// The generated export glue is `unsafe` by nature (`export_name`, raw ABI pointers).
#![allow(unsafe_code)]

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use exports::jobhost::plugin::handler::Guest;
use jobhost::plugin::types::{JobContext, JobError, Manifest};

/// `pub` keeps the handler alive (not dead code) in native builds, which export nothing.
#[derive(Debug)]
pub struct SlowManifest;

impl Guest for SlowManifest {
    fn manifest() -> Manifest {
        loop {
            #[cfg(feature = "sleep")]
            std::thread::sleep(std::time::Duration::from_secs(3600));
            #[cfg(not(feature = "sleep"))]
            std::hint::black_box(());
        }
    }

    fn handle(_context: JobContext, _payload: Vec<u8>) -> Result<(), JobError> {
        Ok(())
    }
}

// The exported symbols are named after the WIT, which native linkers refuse in a cdylib.
#[cfg(target_arch = "wasm32")]
export!(SlowManifest);
