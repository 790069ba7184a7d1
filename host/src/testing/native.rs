//! Native handlers: the same worker path without a sandbox, for tests and benchmarks.

use std::sync::Arc;

use crate::job::{Invocation, Manifest, Outcome};
use crate::worker::{BoxFuture, Handler, Unit};

/// A unit whose jobs run `handler` natively; `key` identifies it like a plugin's path.
pub fn native_unit<F>(key: &str, manifest: Manifest, handler: F) -> Unit
where
    F: Fn(&Invocation<'_>) -> Outcome + Send + Sync + 'static,
{
    Unit::new(key, "native", manifest, Arc::new(Native(handler)))
}

struct Native<F>(F);

impl<F> Handler for Native<F>
where
    F: Fn(&Invocation<'_>) -> Outcome + Send + Sync + 'static,
{
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        let outcome = (self.0)(&job);
        Box::pin(std::future::ready(outcome))
    }
}
