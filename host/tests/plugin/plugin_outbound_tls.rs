//! `https://` requests of plugins against a local HTTPS server whose certificate is signed
//! by a CA made at test time: trusted when `[outbound] ca_certificates` names that CA, and
//! refused inside the guest with a certificate error, the job ending, when it does not.

#![cfg(feature = "tls")]

use std::time::Duration;

use crate::support::outbound::pki::Pki;
use crate::support::outbound::{Server, failure, fetch, probe_granted, probe_granted_in, report};

/// Generous for a handshake on a loaded 2-core machine; far below any hang.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn https_to_a_server_signed_by_the_operators_ca_completes_the_job() {
    let pki = Pki::new();
    let server = Server::start_tls(&pki).await;
    let port = server.addr.port();
    let dir = tempfile::tempdir().expect("a config directory");
    std::fs::create_dir(dir.path().join("certs")).expect("a certs directory");
    std::fs::write(dir.path().join("certs/ca.pem"), &pki.ca_pem).expect("the CA file");
    let toml = format!(
        "[outbound]\nca_certificates = \"certs/ca.pem\"\n\
         [plugins.http-probe]\nallowed_outbound_hosts = [\"https://localhost:{port}\"]\n"
    );
    let (_engine, probe) = probe_granted_in(&dir.path().join("jobhost.toml"), &toml).await;

    let seen = report(fetch(&probe, &format!("https://localhost:{port}/ok"), false).await);
    assert_eq!(seen["status"], 200);
    assert_eq!(seen["body"], "hello");
    assert_eq!(
        server.requests(),
        1,
        "the request went over TLS to the server"
    );
}

#[tokio::test]
async fn https_to_a_server_of_an_unknown_ca_fails_in_the_guest_with_a_certificate_error() {
    let pki = Pki::new();
    let server = Server::start_tls(&pki).await;
    let port = server.addr.port();
    let toml =
        format!("[plugins.http-probe]\nallowed_outbound_hosts = [\"https://localhost:{port}\"]\n");
    let (_engine, probe) = probe_granted(&toml).await;

    let outcome = tokio::time::timeout(
        PATIENCE,
        fetch(&probe, &format!("https://localhost:{port}/ok"), false),
    )
    .await
    .expect("the job ends, it does not hang on the handshake");
    assert_eq!(
        failure(outcome),
        "ErrorCode::TlsCertificateError",
        "the guest sees a certificate error, retryable as the plugin maps it"
    );
    assert_eq!(
        server.requests(),
        0,
        "no request reaches a server the host does not trust"
    );
}
