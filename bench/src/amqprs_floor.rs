//! The floor of a consumer on `amqprs`, an AMQP client whose socket I/O runs as tasks on
//! the caller's tokio runtime, where lapin runs it on a thread of its own
//! (`lapin-io-loop`). The same loop as [`crate::amqp::consume_and_ack_multiple`]: consume,
//! ack every [`crate::amqp::ACK_EVERY`] deliveries with `multiple`, no task per delivery.
//! What it spends per job, beside lapin's floor in one run, is what a change of client
//! could give the host: the evidence the CPU target asks for (BENCHMARKS.md, "Missed
//! targets"). With a plugin, each delivery also calls the no-op's handler in a fresh
//! instance, as lapin's floor does.

use amqprs::channel::{BasicAckArguments, BasicConsumeArguments, BasicQosArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};

use jobhost::plugin::Plugin;
use lapin::uri::AMQPUri;

use crate::amqp::ACK_EVERY;
use crate::memory::invoke_noop;

/// Consume `jobs` deliveries from `queue` at `prefetch` over `url`, acking with `multiple`;
/// with `plugin`, calling the no-op's handler for each first.
pub(crate) async fn consume_and_ack_multiple(
    url: &str,
    queue: &str,
    prefetch: u16,
    jobs: usize,
    plugin: Option<&Plugin>,
) -> anyhow::Result<()> {
    let connection = Connection::open(&arguments(url)?).await?;
    let channel = connection.open_channel(None).await?;
    channel
        .basic_qos(BasicQosArguments::new(0, prefetch, false))
        .await?;
    let (_tag, mut deliveries) = channel
        .basic_consume_rx(BasicConsumeArguments::new(
            queue,
            "jobhost-bench-amqprs-floor",
        ))
        .await?;
    for received in 1..=jobs {
        let message = deliveries
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("amqprs closed the consumer of `{queue}`"))?;
        if let Some(plugin) = plugin {
            invoke_noop(plugin).await?;
        }
        if received % ACK_EVERY == 0 || received == jobs {
            let deliver = message.deliver.ok_or_else(|| {
                anyhow::anyhow!("a message of `{queue}` came without its deliver")
            })?;
            channel
                .basic_ack(BasicAckArguments::new(deliver.delivery_tag(), true))
                .await?;
        }
    }
    channel.close().await?;
    connection.close().await?;
    Ok(())
}

/// `url` as amqprs takes it. Parsed by lapin's parser, which decodes the vhost (`%2f` is
/// `/`); amqprs's own would ask the broker for a vhost named `%2f`.
pub(crate) fn arguments(url: &str) -> anyhow::Result<OpenConnectionArguments> {
    let uri: AMQPUri = url
        .parse()
        .map_err(|error| anyhow::anyhow!("`{url}` is not an AMQP URI: {error}"))?;
    let authority = &uri.authority;
    let mut arguments = OpenConnectionArguments::new(
        &authority.host,
        authority.port,
        &authority.userinfo.username,
        &authority.userinfo.password,
    );
    arguments.virtual_host(&uri.vhost);
    Ok(arguments)
}
