//! [`crate::plugin!`]: the one line that turns a crate into a jobhost plugin.

/// Exports this crate as a jobhost plugin: its queue set and its jobs with their handlers.
///
/// ```
/// use jobhost_sdk::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
/// #[queues(prefix = "myapp")]
/// enum AppQueues {
///     #[queue(retry(max_attempts = 3, backoff = "exponential", base = "1s", max = "2m"))]
///     Images,
///     Emails,
/// }
///
/// #[derive(Debug, Serialize, Deserialize, Job)]
/// #[job(queue = AppQueues::Images, retry(max_attempts = 5))]
/// struct ResizeImage { path: String }
///
/// #[derive(Debug, Serialize, Deserialize, Job)]
/// #[job(queue = AppQueues::Emails)]
/// struct SendEmail { to: String }
///
/// fn resize(job: ResizeImage, ctx: &JobContext) -> Result<(), JobError> {
///     ctx.info(&format!("resizing {}", job.path));
///     Ok(())
/// }
///
/// fn send_email(job: SendEmail, _ctx: &JobContext) -> Result<(), JobError> {
///     if !job.to.contains('@') {
///         return Err(JobError::fatal(format!("invalid address `{}`", job.to)));
///     }
///     Ok(())
/// }
///
/// jobhost_sdk::plugin!(queues = AppQueues, jobs = {
///     ResizeImage => resize,
///     SendEmail => send_email,
/// });
/// ```
///
/// Each handler is a `fn(Job, &JobContext) -> Result<(), JobError>`, and each job's queue
/// must belong to `queues` (a compile error otherwise). The expansion implements the WIT
/// `handler` interface:
/// - `manifest`: the plugin is named after the crate (`CARGO_PKG_NAME`); it lists every
///   queue of the set and every job with its own retry policy and timeout.
/// - `handle`: runs the handler of the delivery's job type on its decoded payload. A
///   payload that does not decode is a `decode` error (dead-lettered by the host, never
///   retried), an unknown job type is fatal, and a panic's message reaches the host.
///
/// Invoke it once per crate, at the crate root of a `cdylib` built for `wasm32-wasip2`.
#[macro_export]
macro_rules! plugin {
    (queues = $queues:ty, jobs = { $($job:ty => $handler:expr),+ $(,)? } $(,)?) => {
        // `pub` keeps the handlers alive (not dead code) in native builds, which export nothing.
        #[doc(hidden)]
        #[derive(Debug)]
        pub struct __JobhostPlugin;

        impl $crate::__private::Guest for __JobhostPlugin {
            fn manifest() -> $crate::__private::Manifest {
                $crate::__private::install_panic_hook();
                $crate::__private::manifest::<$queues>(
                    ::core::env!("CARGO_PKG_NAME"),
                    ::std::vec![$($crate::__private::job_config::<$queues, $job>()),+],
                )
            }

            fn handle(
                context: $crate::__private::JobContext,
                payload: ::std::vec::Vec<u8>,
            ) -> ::core::result::Result<(), $crate::__private::JobError> {
                $crate::__private::handle(context, &payload, &[$((
                    <$job as $crate::Job>::NAME,
                    |payload, ctx| $crate::__private::run::<$job>($handler, payload, ctx),
                )),+])
            }
        }

        // The exported symbols are named after the WIT (`jobhost:plugin/handler@...#handle`),
        // which native linkers refuse in a cdylib; natively the crate only type-checks.
        #[cfg(target_arch = "wasm32")]
        $crate::__private::bindings::export!(
            __JobhostPlugin with_types_in $crate::__private::bindings
        );
    };
}
