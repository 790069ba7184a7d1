//! Connecting: failures are errors that name the broker without its password.

use jobhost::broker::{BrokerError, RabbitMqBackend, RabbitMqOptions};

use crate::support;
use crate::support::amqp_url;

const PASSWORD: &str = "s3cret-do-not-log";

async fn connect_error(url: &str) -> BrokerError {
    RabbitMqBackend::connect(url, RabbitMqOptions::default())
        .await
        .expect_err("the connection must fail")
}

#[tokio::test]
async fn an_unreachable_broker_is_an_error_that_masks_the_password() {
    let error = connect_error(&format!("amqp://guest:{PASSWORD}@127.0.0.1:1/%2f")).await;
    let message = error.to_string();
    assert!(matches!(error, BrokerError::Connection(_)), "{message}");
    assert!(
        !message.contains(PASSWORD),
        "the password leaked: {message}"
    );
    assert!(
        message.contains("guest:***@127.0.0.1:1"),
        "the broker is named: {message}"
    );
}

#[tokio::test]
async fn refused_credentials_are_an_error_that_masks_the_password() {
    let url = amqp_url();
    let Some((scheme, rest)) = url.split_once("://") else {
        panic!("AMQP_URL `{url}` has no scheme");
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let error = connect_error(&format!("{scheme}://guest:{PASSWORD}@{host}")).await;
    let message = error.to_string();
    assert!(
        !message.contains(PASSWORD),
        "the password leaked: {message}"
    );
}

#[tokio::test]
async fn with_a_list_of_brokers_an_unreachable_first_one_is_skipped_for_the_next() {
    let list = format!("amqp://guest:{PASSWORD}@127.0.0.1:1/%2f,{}", amqp_url());
    let backend = match RabbitMqBackend::connect(&list, RabbitMqOptions::default()).await {
        Ok(backend) => backend,
        Err(_) if support::skip_requested() => return,
        Err(error) => panic!("the second broker of the list answers: {error}"),
    };
    backend.close().await;
}

#[tokio::test]
async fn when_no_broker_of_a_list_answers_the_error_names_each_without_its_password() {
    let error = connect_error(&format!(
        "amqp://guest:{PASSWORD}@127.0.0.1:1/%2f,amqp://guest:{PASSWORD}@127.0.0.1:2/%2f"
    ))
    .await;
    let message = error.to_string();
    assert!(
        !message.contains(PASSWORD),
        "the password leaked: {message}"
    );
    for node in ["guest:***@127.0.0.1:1", "guest:***@127.0.0.1:2"] {
        assert!(message.contains(node), "`{node}` is named: {message}");
    }
}
