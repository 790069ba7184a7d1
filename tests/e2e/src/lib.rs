//! End-to-end tests across the host, the SDK and real plugins built for `wasm32-wasip2`;
//! the tests live in `tests/`, and this library holds what they share.
//!
//! The host's producer is checked at compile time: a job of another queue set is refused.
//! (The example lives here because rustdoc cannot expand the host crate's own WIT bindings:
//! their `jobhost` module is ambiguous with the crate it is compiled into.)
//!
//! ```compile_fail,E0271
//! # use jobhost::{broker::MemoryBackend, producer::Producer};
//! # use jobhost_sdk::{Job, Queues};
//! # use serde::{Deserialize, Serialize};
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! enum ShopQueues { Orders }
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! enum MailQueues { Emails }
//!
//! #[derive(Debug, Serialize, Deserialize, Job)]
//! #[job(queue = MailQueues::Emails)]
//! struct SendEmail { to: String }
//!
//! async fn send(shop: &Producer<ShopQueues, MemoryBackend>) {
//!     // error[E0271]: `SendEmail` belongs to `MailQueues`, not `ShopQueues`.
//!     shop.enqueue(&SendEmail { to: "a@b.c".into() }).await;
//! }
//! ```

use std::path::Path;

use jobhost::plugin::{Engine, EngineConfig};

/// An engine that caches compiled plugins under `tmp` (pass the test binary's
/// `CARGO_TARGET_TMPDIR`), because a debug build of the compiler takes seconds per plugin
/// and every test starts its own engine.
pub fn engine(tmp: &str) -> Engine {
    let cache_dir = Path::new(tmp).join("plugin-cache");
    Engine::new(EngineConfig {
        cache_dir: Some(cache_dir),
        ..EngineConfig::default()
    })
    .expect("a default engine starts")
}
