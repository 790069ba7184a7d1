//! The seam between the worker and what runs a job.

use std::future::Future;
use std::pin::Pin;

use crate::job::{Invocation, Outcome};

/// A boxed future, because handlers are stored as trait objects in the registry.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs one delivery of a job and says how it ended.
///
/// Plugins implement it by running a fresh WebAssembly instance. Native implementations
/// exist only to measure the sandbox's cost in benchmarks and to script behaviour in tests.
pub trait Handler: Send + Sync + 'static {
    /// Run one attempt.
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome>;
}

impl Handler for crate::plugin::Plugin {
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(crate::plugin::Plugin::invoke(self, job))
    }
}
