//! One host on a three-node RabbitMQ cluster with quorum queues, against one node with
//! classic queues: what replication costs a host's drain rate.
//!
//! Both drains are jobhost + the wasm no-op at prefetch 16 over pre-published jobs, as in
//! the `rabbitmq` scenario; the classic queue is on `AMQP_URL`, the quorum queue on the
//! cluster (`--cluster-url`, or `JOBHOST_CLUSTER_AMQP` as `.ci/cluster-broker.sh` sets it),
//! whose three nodes share this machine's cores with the host:
//!
//! ```sh
//! .ci/cluster-broker.sh cargo run --release -p jobhost-bench -- cluster
//! ```

use anyhow::Context as _;
use jobhost::plugin::EngineConfig;
use jobhost_sdk::QueueType;

use crate::Sizes;
use crate::amqp::{self, queue_name};
use crate::rabbit::{Rounds, through_host};
use crate::report::Report;
use crate::units::{NOOP_JOB, engine, load_fixture, plugin_unit, single_job};

/// The prefetch of both drains, both crates' default.
const PREFETCH: u16 = 16;

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let cluster = sizes.cluster_url.as_deref().context(
        "the cluster scenario needs a cluster: pass `--cluster-url URL,URL,URL` or run it \
         under `.ci/cluster-broker.sh`",
    )?;
    let jobs = sizes.rabbit_jobs;
    let engine = engine(EngineConfig::default())?;
    let plugin = load_fixture(&engine, "noop").await?;
    let single = amqp::jobhost_backend(&sizes.amqp_url).await?;
    let clustered = amqp::jobhost_backend(cluster).await?;
    let first_node = cluster.split(',').next().unwrap_or(cluster);
    let (single_connection, cluster_connection) = (
        amqp::connect(&sizes.amqp_url).await?,
        amqp::connect(first_node).await?,
    );

    let (mut classic, mut quorum) = (Rounds::default(), Rounds::default());
    for _ in 0..sizes.rounds {
        for queue_type in [QueueType::Classic, QueueType::Quorum] {
            let queue = queue_name(queue_type.as_str());
            let mut manifest = single_job(plugin.manifest(), NOOP_JOB, &queue, Some(PREFETCH));
            manifest.queues[0].queue_type = queue_type;
            let unit = plugin_unit(&plugin, manifest);
            let (backend, connection, rounds) = match queue_type {
                QueueType::Classic => (&single, &single_connection, &mut classic),
                QueueType::Quorum => (&clustered, &cluster_connection, &mut quorum),
            };
            rounds.push(through_host(backend, unit, &queue, jobs).await?);
            amqp::delete(connection, &queue).await?;
        }
    }
    single.close().await;
    clustered.close().await;

    let classic = classic.row(format!(
        "one node, classic queue: jobhost + wasm no-op, p{PREFETCH}"
    ));
    let quorum = quorum.row(format!(
        "3-node cluster, quorum queue: jobhost + wasm no-op, p{PREFETCH}"
    ));
    Ok(Report {
        rows: vec![classic.clone(), quorum.against(&classic, None)],
        details: vec![format!(
            "cluster: {jobs} pre-published jobs per queue type and round, {} rounds (median shown), \
             prefetch {PREFETCH}; one host; the cluster's three nodes and the single node run on \
             this machine",
            sizes.rounds
        )],
    })
}
