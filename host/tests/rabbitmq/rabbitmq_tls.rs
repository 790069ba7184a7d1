//! `amqps://` against a RabbitMQ node that listens only on TLS, with certificates made at
//! test time: run through `.ci/tls-broker.sh`, which starts the node, sets
//! `JOBHOST_TLS_URL` and the certificate paths, and stops the node afterwards:
//!
//! ```sh
//! .ci/tls-broker.sh cargo test -p jobhost --test rabbitmq rabbitmq_tls::
//! ```
//!
//! Without `JOBHOST_TLS_URL` the tests say so and pass, so that `cargo test --workspace`
//! (which builds them: `tls` is a default feature) runs on a machine without that node;
//! `JOBHOST_REQUIRE_TLS_BROKER=1` (set by `.ci/test`) makes a missing node a failure.

#![cfg(feature = "tls")]

use std::time::Duration;

use jobhost::broker::{RabbitMqBackend, RabbitMqOptions};

/// Generous for a TLS handshake and an AMQP login on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// The node's URL and the certificate files, or `None` outside the script (a failure
/// under CI).
struct Node {
    url: String,
    ca: String,
    client_cert: Vec<u8>,
    client_key: Vec<u8>,
}

fn node() -> Option<Node> {
    let Ok(url) = std::env::var("JOBHOST_TLS_URL") else {
        assert!(
            std::env::var("JOBHOST_REQUIRE_TLS_BROKER").as_deref() != Ok("1"),
            "JOBHOST_REQUIRE_TLS_BROKER=1 but JOBHOST_TLS_URL is unset: run the tests under \
             `.ci/tls-broker.sh`, which sets it"
        );
        eprintln!(
            "SKIPPED: no TLS RabbitMQ node (JOBHOST_TLS_URL is unset); run \
             `.ci/tls-broker.sh cargo test -p jobhost --test rabbitmq rabbitmq_tls::`"
        );
        return None;
    };
    let read = |variable: &str| {
        let path = std::env::var(variable).unwrap_or_else(|_| panic!("{variable} is set"));
        std::fs::read(&path).unwrap_or_else(|err| panic!("{variable} `{path}` reads: {err}"))
    };
    Some(Node {
        url,
        ca: String::from_utf8(read("JOBHOST_TLS_CA")).expect("the CA is PEM text"),
        client_cert: read("JOBHOST_TLS_CLIENT_CERT"),
        client_key: read("JOBHOST_TLS_CLIENT_KEY"),
    })
}

async fn connect(url: &str, options: RabbitMqOptions) -> Result<RabbitMqBackend, String> {
    let options = options.outage_timeout(PATIENCE);
    tokio::time::timeout(PATIENCE, RabbitMqBackend::connect(url, options))
        .await
        .expect("the connection attempt ends in time")
        .map_err(|err| err.to_string())
}

#[tokio::test]
async fn amqps_with_the_brokers_ca_file_connects() {
    let Some(node) = node() else { return };
    let backend = connect(
        &node.url,
        RabbitMqOptions::default().trust_certificates(node.ca),
    )
    .await
    .expect("a broker whose certificate the given CA signed is trusted");
    backend.close().await;
}

#[tokio::test]
async fn a_client_certificate_logs_in_with_external_without_a_password() {
    let Some(node) = node() else { return };
    let (_, host) = node.url.split_once('@').expect("the URL has a user");
    // No user and no password: the broker takes the certificate's CN as the user.
    let url = format!("amqps://{host}?auth_mechanism=external");
    let without = RabbitMqOptions::default().trust_certificates(node.ca.clone());
    connect(&url, without)
        .await
        .expect_err("without the certificate there is nothing to log in with");
    let options = RabbitMqOptions::default()
        .trust_certificates(node.ca)
        .client_certificate(node.client_cert, node.client_key);
    let backend = connect(&url, options)
        .await
        .expect("the client certificate authenticates");
    backend.close().await;
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_refused_with_a_message_that_says_so() {
    let Some(node) = node() else { return };
    let err = connect(&node.url, RabbitMqOptions::default())
        .await
        .expect_err("a certificate of an unknown CA is refused");
    assert!(
        err.contains("certificate") && err.contains("UnknownIssuer"),
        "the message says the server's certificate is not trusted: {err}"
    );
    eprintln!("the refusal: {err}");
    assert!(
        !err.contains("guest:guest"),
        "the message does not show the password: {err}"
    );
}
