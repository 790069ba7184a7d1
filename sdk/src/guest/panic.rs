//! Forwarding a guest panic's message to the host.

use std::panic::{self, PanicHookInfo};
use std::sync::Once;

use super::bindings::jobhost::plugin::host;

/// Installs, once per instance, a panic hook that hands the panic's message and location to
/// the host through `report-panic`.
///
/// Because a `wasm32-wasip2` panic aborts, the host otherwise sees only a bare
/// `unreachable` trap; with the hook the failed attempt carries the guest's own message.
pub fn install_panic_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| panic::set_hook(Box::new(|info| host::report_panic(&describe(info)))));
}

fn describe(info: &PanicHookInfo<'_>) -> String {
    let message = info
        .payload_as_str()
        .unwrap_or("panic with a non-string payload");
    match info.location() {
        Some(at) => format!("{message} (at {}:{}:{})", at.file(), at.line(), at.column()),
        None => message.to_owned(),
    }
}
