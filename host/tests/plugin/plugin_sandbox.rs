//! The sandbox grants nothing beyond the contract: no files, no environment, no sockets.

use jobhost::job::Outcome;
use jobhost_sdk::JobError;

use crate::support::plugin::{invocation, load};

/// Run a `sandbox` job, which fails retryably with the OS error when it is denied.
async fn denial(job_type: &str, payload: &[u8]) -> String {
    let plugin = load("sandbox").await;
    match plugin.invoke(invocation(job_type, payload)).await {
        Outcome::Failed(JobError::Retryable(message)) => message,
        outcome => panic!("`{job_type}` must be denied, got {outcome:?}"),
    }
}

#[tokio::test]
async fn a_guest_cannot_read_host_files() {
    let message = denial("sandbox.ReadFile", br#"{"path": "/etc/passwd"}"#).await;
    assert!(
        message.starts_with("cannot read `/etc/passwd`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_guest_cannot_read_the_host_environment() {
    // Because the host has a PATH, an `Ok` would mean the variable leaked.
    assert!(
        std::env::var_os("PATH").is_some(),
        "the host has a PATH to leak"
    );
    let message = denial("sandbox.ReadEnv", br#"{"name": "PATH"}"#).await;
    assert!(
        message.starts_with("cannot read env var `PATH`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_guest_cannot_open_sockets() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local listener");
    let addr = listener.local_addr().expect("its address");
    let payload = format!(r#"{{"addr": "{addr}"}}"#);
    let message = denial("sandbox.OpenSocket", payload.as_bytes()).await;
    assert!(
        message.starts_with(&format!("cannot connect to `{addr}`")),
        "{message}"
    );
}
