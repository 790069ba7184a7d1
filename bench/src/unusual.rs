//! Valid messages that a client may fail to decode: why the host stays on lapin although the
//! host's worker on amqprs spends less CPU per job (BENCHMARKS.md, "Missed targets",
//! the amqprs finding).
//!
//! # Contract
//! - Each case is one message with unusual but valid AMQP headers, which RabbitMQ accepts
//!   and delivers, published by lapin into a queue of its own with one ordinary message
//!   behind it.
//! - Each client (raw lapin, amqprs) consumes each case's queue on a connection of its own
//!   and passes the case when both messages arrive within [`PATIENCE`] and its connection
//!   is still open afterwards. A client that fails a case would, as a job host, see the
//!   broker redeliver the message on every new connection: a poison message that no
//!   retry or dead letter can end.
//! - The control case (every field type RabbitMQ parses, all strings UTF-8) shows that a
//!   failure is the case's, not the client's setup.
//! - Queues are named `bench-<run id>.unusual.*` and deleted afterwards.

use std::time::Duration;

use amqprs::channel::{BasicConsumeArguments, BasicQosArguments};
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

use crate::amqp::{connect, delete, next_delivery, queue_name};

/// How long a client has to hand out both messages of a case.
const PATIENCE: Duration = Duration::from_secs(5);

/// Bytes that are no UTF-8: valid in an AMQP long string, which holds octets.
const NOT_UTF8: [u8; 2] = [0xff, 0xfe];

/// Each case: its name, and the headers of its unusual message.
fn cases() -> Vec<(&'static str, FieldTable)> {
    let not_utf8 = || AMQPValue::LongString(LongString::from(NOT_UTF8.to_vec()));
    let mut nested = FieldTable::default();
    nested.insert("inner".into(), not_utf8());
    vec![
        ("every field type, UTF-8", every_type()),
        (
            "a long string that is not UTF-8",
            table(vec![("note", not_utf8())]),
        ),
        (
            "... inside an array",
            table(vec![(
                "notes",
                AMQPValue::FieldArray(FieldArray::from(vec![not_utf8()])),
            )]),
        ),
        (
            "... inside a nested table",
            table(vec![("nested", AMQPValue::FieldTable(nested))]),
        ),
        (
            "a `traceparent` that is not UTF-8",
            table(vec![("traceparent", not_utf8())]),
        ),
    ]
}

/// One value of each type RabbitMQ's parser takes (`rabbit_binary_parser`).
fn every_type() -> FieldTable {
    let mut inner = FieldTable::default();
    inner.insert("k".into(), AMQPValue::LongString("v".into()));
    table(vec![
        ("t", AMQPValue::Boolean(true)),
        ("b", AMQPValue::ShortShortInt(-1)),
        ("B", AMQPValue::ShortShortUInt(1)),
        ("s", AMQPValue::ShortInt(-2)),
        ("u", AMQPValue::ShortUInt(2)),
        ("I", AMQPValue::LongInt(-3)),
        ("i", AMQPValue::LongUInt(3)),
        ("l", AMQPValue::LongLongInt(-4)),
        ("f", AMQPValue::Float(0.5)),
        ("d", AMQPValue::Double(0.25)),
        (
            "D",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 12,
            }),
        ),
        ("S", AMQPValue::LongString("text".into())),
        (
            "A",
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongInt(1)])),
        ),
        ("T", AMQPValue::Timestamp(1_700_000_000)),
        ("F", AMQPValue::FieldTable(inner)),
        ("x", AMQPValue::ByteArray(vec![0xff, 0x00].into())),
        ("V", AMQPValue::Void),
    ])
}

fn table(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert(key.into(), value);
    }
    table
}

/// Run every case through every client and print which passed.
pub(crate) async fn run(url: &str) -> anyhow::Result<()> {
    let connection = connect(url).await?;
    let publisher = connection.create_channel().await?;
    let mut rows = Vec::new();
    for (n, (case, headers)) in cases().into_iter().enumerate() {
        let mut row = vec![case.to_owned()];
        for (m, client) in Client::ALL.into_iter().enumerate() {
            let queue = queue_name(&format!("unusual.{n}.{m}"));
            fill(&publisher, &queue, &headers).await?;
            let verdict = client.consume(url, &queue).await;
            delete(&connection, &queue).await?;
            row.push(verdict.unwrap_or_else(|error| format!("fails: {error}")));
        }
        rows.push(row);
    }
    let _ = connection.close(200, "done".into()).await;
    let names: Vec<&str> = Client::ALL.iter().map(|client| client.name()).collect();
    println!(
        "| message | {} |\n|---|{}",
        names.join(" | "),
        "---|".repeat(names.len())
    );
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
    Ok(())
}

/// A client asked for each case's messages.
#[derive(Debug, Clone, Copy)]
enum Client {
    Lapin,
    Amqprs,
}

impl Client {
    const ALL: [Self; 2] = [Self::Lapin, Self::Amqprs];

    fn name(self) -> &'static str {
        match self {
            Self::Lapin => "raw lapin",
            Self::Amqprs => "amqprs",
        }
    }

    /// Consume `queue` on a connection of its own: the case's verdict.
    async fn consume(self, url: &str, queue: &str) -> anyhow::Result<String> {
        match self {
            Self::Lapin => through_lapin(url, queue).await,
            Self::Amqprs => through_amqprs(url, queue).await,
        }
    }
}

/// Declare `queue` and put the unusual message and an ordinary one into it.
async fn fill(channel: &Channel, queue: &str, headers: &FieldTable) -> anyhow::Result<()> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let unusual = BasicProperties::default().with_headers(headers.clone());
    for (body, properties) in [
        (&b"unusual"[..], unusual),
        (b"ordinary", BasicProperties::default()),
    ] {
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await?
            .await?;
    }
    Ok(())
}

/// What a client that received both messages and kept its connection reports.
const PASSED: &str = "both received, connection open";

async fn through_lapin(url: &str, queue: &str) -> anyhow::Result<String> {
    let connection = connect(url).await?;
    let channel = connection.create_channel().await?;
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut received = 0;
    while received < 2 {
        match tokio::time::timeout(PATIENCE, next_delivery(&mut consumer, queue)).await {
            Ok(Ok(_)) => received += 1,
            Ok(Err(error)) => anyhow::bail!("after {received} of 2: {error}"),
            Err(_) => break,
        }
    }
    let open = connection.status().connected();
    let _ = connection.close(200, "done".into()).await;
    Ok(verdict(received, open))
}

async fn through_amqprs(url: &str, queue: &str) -> anyhow::Result<String> {
    let connection =
        amqprs::connection::Connection::open(&crate::amqprs_floor::arguments(url)?).await?;
    let channel = connection.open_channel(None).await?;
    channel
        .basic_qos(BasicQosArguments::new(0, 10, false))
        .await?;
    let mut arguments = BasicConsumeArguments::new(queue, "jobhost-bench-unusual");
    arguments.manual_ack(false);
    // The consume itself can fail: the broker delivers right after `consume-ok`, so a
    // message amqprs cannot decode may end the connection before the call returns.
    let mut received = 0;
    if let Ok((_tag, mut deliveries)) = channel.basic_consume_rx(arguments).await {
        while received < 2 {
            match tokio::time::timeout(PATIENCE, deliveries.recv()).await {
                Ok(Some(_)) => received += 1,
                Ok(None) | Err(_) => break,
            }
        }
    }
    let open = connection.is_open();
    if open {
        let _ = connection.close().await;
    }
    Ok(verdict(received, open))
}

fn verdict(received: usize, open: bool) -> String {
    match (received, open) {
        (2, true) => PASSED.to_owned(),
        (received, open) => format!(
            "**{received} of 2 received, connection {}**",
            if open { "open" } else { "closed" }
        ),
    }
}
