//! What a fleet-wide concurrency cap costs per job on RabbitMQ (docs/flow-control.md):
//! pre-published no-op jobs drained by the host with a native no-op handler at prefetch 16,
//! without a cap, under a queue cap, and under a queue cap and a per-key cap (every job in
//! one key's bucket). Each cap is 1000, above the 64 jobs the worker runs at once, so it
//! never holds a job back: the difference is what taking and giving back a permit costs,
//! one `basic.get` round trip before each job and one `basic.reject` after it, per cap.
//! Rounds interleave the three; each row is the median round.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use jobhost::broker::Permits;
use jobhost::grants::{Grants, SharedGrants};
use jobhost::plugin::EngineConfig;
use jobhost::worker::WorkerConfig;
use lapin::options::QueueDeleteOptions;

use crate::Sizes;
use crate::amqp::{self, queue_name};
use crate::rabbit::{Rounds, through_host_with};
use crate::report::{Report, Row};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, single_job};

/// The prefetch of every drain.
const PREFETCH: u16 = 16;

/// A cap that never binds: above the worker's default concurrency.
const LIMIT: u32 = 1000;

/// The caps a drain runs under, in this order in each round.
#[derive(Debug, Clone, Copy)]
enum Capped {
    No,
    Queue,
    QueueAndKey,
}

impl Capped {
    const ALL: [Self; 3] = [Self::No, Self::Queue, Self::QueueAndKey];

    fn label(self) -> String {
        let caps = match self {
            Self::No => "no cap",
            Self::Queue => "a queue cap",
            Self::QueueAndKey => "a queue cap and a key cap",
        };
        format!("rabbitmq p{PREFETCH}: jobhost + native no-op, {caps}")
    }

    /// The grants file of the drain of `queue`.
    fn grants(self, queue: &str) -> String {
        let queue_cap = format!("[queues.\"{queue}\"]\nconcurrency = {LIMIT}\n");
        let key_cap =
            format!("[jobs.\"{NOOP_JOB}\"]\nconcurrency = {{ key = \"k\", limit = {LIMIT} }}\n");
        match self {
            Self::No => String::new(),
            Self::Queue => queue_cap,
            Self::QueueAndKey => queue_cap + &key_cap,
        }
    }
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.rabbit_jobs;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let backend = amqp::jobhost_backend(url).await?;
    let plugin = load_fixture(&engine(EngineConfig::default())?, "noop").await?;
    let mut rounds: [Rounds; 3] = Default::default();
    for _ in 0..sizes.rounds {
        for (rounds, capped) in rounds.iter_mut().zip(Capped::ALL) {
            let queue = queue_name(&format!("caps-{capped:?}").to_lowercase());
            let manifest = single_job(plugin.manifest(), NOOP_JOB, &queue, Some(PREFETCH));
            let config = WorkerConfig {
                caps: SharedGrants::new(Grants::parse(
                    Path::new("jobhost.toml"),
                    &capped.grants(&queue),
                )?),
                ..WorkerConfig::default()
            };
            let held_at_most = config.broker_consumer_timeout;
            let unit = native_noop(manifest);
            rounds.push(through_host_with(&backend, unit, &queue, jobs, config).await?);
            amqp::delete(&connection, &queue).await?;
            delete_permits(&connection, &queue, held_at_most).await?;
        }
    }
    backend.close().await;

    let [none, queue, both] = {
        let mut capped = Capped::ALL.into_iter();
        rounds.map(|rounds| rounds.row(capped.next().expect("one per cap").label()))
    };
    let rows: Vec<Row> = vec![
        queue.clone().against(&none, None),
        queue.cpu_against(&none, None),
        both.clone().against(&none, None),
        both.cpu_against(&none, None),
    ];
    Ok(Report {
        rows: [none, queue, both].into_iter().chain(rows).collect(),
        details: vec![format!(
            "caps: {jobs} pre-published no-op jobs per drain and round, {} rounds (median shown), prefetch {PREFETCH}, native no-op handler, `WorkerConfig::default()` (64 jobs at once) with caps of {LIMIT}, which never bind; cpu/job is the process's user + system CPU over the drain per job",
            sizes.rounds,
        )],
    })
}

/// Delete the permit queues a drain of `queue` made, so the run leaves the broker as found.
async fn delete_permits(
    connection: &lapin::Connection,
    queue: &str,
    held_at_most: Duration,
) -> anyhow::Result<()> {
    for permits in [
        Permits::for_queue(queue, LIMIT, held_at_most),
        Permits::for_key(NOOP_JOB, None, LIMIT, held_at_most),
    ] {
        let channel = connection.create_channel().await?;
        channel
            .queue_delete(permits.name.as_str().into(), QueueDeleteOptions::default())
            .await?;
        let _ = channel.close(200, "done".into()).await;
    }
    Ok(())
}
