//! What a fleet-wide concurrency cap and a rate limit cost per job on RabbitMQ
//! (docs/flow-control.md): pre-published no-op jobs drained by the host with a native no-op
//! handler at prefetch 16, without a limit, under a queue cap, under a queue cap and a
//! per-key cap (every job in one key's bucket), and under a per-key rate limit.
//!
//! No limit ever holds a job back, so the difference is what the limit costs. Each cap is
//! 1000, above the 64 jobs the worker runs at once: taking and giving back a permit, one
//! `basic.get` round trip before each job and one `basic.reject` after it, per cap. The rate
//! limit is the fastest there is, 1000/s per key, over as few keys as hold the drain's jobs
//! in full buckets (a burst of at most 10,000 each), filled by the host's own refiller
//! before the drain starts: taking a token, one `basic.get` round trip before each job,
//! while the refiller publishes 1000 tokens a second per key beside it. A drain in which a
//! job found no token is refused rather than reported. Rounds interleave the four; each row
//! is the median round.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use jobhost::broker::{Backend, Permits, RabbitMqBackend, Tokens};
use jobhost::envelope::Envelope;
use jobhost::grants::{Grants, MAX_BURST, SharedGrants};
use jobhost::plugin::EngineConfig;
use jobhost::worker::WorkerConfig;
use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use serde_json::value::RawValue;

use crate::Sizes;
use crate::amqp::{self, one_second_hold, queue_name};
use crate::memory::noop_envelope;
use crate::rabbit::{Rounds, through_host_with};
use crate::report::{Report, Row};
use crate::units::{NOOP_JOB, engine, load_fixture, native_noop, single_job};

/// The prefetch of every drain.
const PREFETCH: u16 = 16;

/// A cap that never binds: above the worker's default concurrency.
const LIMIT: u32 = 1000;

/// The rate limit of each key in jobs a second, the fastest there is.
const RATE: u32 = 1000;

/// The rate-limited drain of `jobs` jobs: how many keys, and the burst of each, so that
/// full buckets hold every job.
fn rated_keys(jobs: usize) -> (usize, u32) {
    let burst = MAX_BURST as usize;
    let keys = jobs.div_ceil(burst).max(1);
    let per_key = u32::try_from(jobs.div_ceil(keys)).unwrap_or(MAX_BURST);
    (keys, per_key.max(1))
}

/// The limits a drain runs under, in this order in each round.
#[derive(Debug, Clone, Copy)]
enum Capped {
    No,
    Queue,
    QueueAndKey,
    KeyRate,
}

impl Capped {
    const ALL: [Self; 4] = [Self::No, Self::Queue, Self::QueueAndKey, Self::KeyRate];

    fn label(self) -> String {
        let caps = match self {
            Self::No => "no cap",
            Self::Queue => "a queue cap",
            Self::QueueAndKey => "a queue cap and a key cap",
            Self::KeyRate => "a key rate limit",
        };
        format!("rabbitmq p{PREFETCH}: jobhost + native no-op, {caps}")
    }

    /// The grants file of the drain of `jobs` jobs on `queue`.
    fn grants(self, queue: &str, jobs: usize) -> String {
        let queue_cap = format!("[queues.\"{queue}\"]\nconcurrency = {LIMIT}\n");
        let key_cap =
            format!("[jobs.\"{NOOP_JOB}\"]\nconcurrency = {{ key = \"k\", limit = {LIMIT} }}\n");
        let (_, burst) = rated_keys(jobs);
        let key_rate = format!(
            "[jobs.\"{NOOP_JOB}\"]\nrate = {{ key = \"k\", limit = \"{RATE}/s\", burst = {burst} }}\n"
        );
        match self {
            Self::No => String::new(),
            Self::Queue => queue_cap,
            Self::QueueAndKey => queue_cap + &key_cap,
            Self::KeyRate => key_rate,
        }
    }

    /// The `jobs` jobs of the drain of `queue`: keyed over [`rated_keys`] when rate-limited.
    fn envelopes(self, queue: &str, jobs: usize) -> anyhow::Result<Vec<Envelope>> {
        let (keys, _) = rated_keys(jobs);
        (0..jobs)
            .map(|i| match self {
                Self::KeyRate => {
                    let payload = RawValue::from_string(format!(r#"{{"k":{}}}"#, i % keys))?;
                    Ok(Envelope::new(NOOP_JOB, queue, payload))
                }
                _ => Ok(noop_envelope(queue)),
            })
            .collect()
    }
}

/// The token buckets of the rate-limited drain of `jobs` jobs, one per key.
fn buckets(jobs: usize) -> impl Iterator<Item = Tokens> {
    let interval = Duration::from_secs(1) / RATE;
    let (keys, burst) = rated_keys(jobs);
    (0..keys).map(move |k| Tokens::for_key(NOOP_JOB, Some(&k.to_string()), interval, burst))
}

/// Make the buckets and have `backend` refill them, then let them fill (a burst at the
/// rate, and a tick more): a drain that started on empty buckets would measure their
/// filling, not a token's cost.
async fn fill_buckets(backend: &RabbitMqBackend, jobs: usize) -> anyhow::Result<()> {
    for tokens in buckets(jobs) {
        backend.take_token(&tokens).await?;
    }
    let (_, burst) = rated_keys(jobs);
    tokio::time::sleep(Duration::from_secs(1) * burst / RATE + Duration::from_millis(500)).await;
    Ok(())
}

pub(crate) async fn run(sizes: &Sizes) -> anyhow::Result<Report> {
    let url = &sizes.amqp_url;
    let jobs = sizes.rabbit_jobs;
    let connection = amqp::connect(url)
        .await
        .with_context(|| format!("connecting to RabbitMQ at `{url}` (set AMQP_URL)"))?;
    let backend = amqp::jobhost_backend(url).await?;
    let plugin = load_fixture(&engine(EngineConfig::default())?, "noop").await?;
    let mut rounds: [Rounds; 4] = Default::default();
    for _ in 0..sizes.rounds {
        for (rounds, capped) in rounds.iter_mut().zip(Capped::ALL) {
            let queue = queue_name(&format!("caps-{capped:?}").to_lowercase());
            let manifest = single_job(plugin.manifest(), NOOP_JOB, &queue, Some(PREFETCH));
            let config = WorkerConfig {
                caps: SharedGrants::new(Grants::parse(
                    Path::new("jobhost.toml"),
                    &capped.grants(&queue, jobs),
                )?),
                ..WorkerConfig::default()
            };
            let held_at_most = config.broker_consumer_timeout;
            let unit = native_noop(manifest);
            if let Capped::KeyRate = capped {
                fill_buckets(&backend, jobs).await?;
            }
            let envelopes = capped.envelopes(&queue, jobs)?;
            rounds.push(through_host_with(&backend, unit, envelopes, config).await?);
            let throttled = exists(&connection, &one_second_hold(&queue)?.name).await?;
            amqp::delete(&connection, &queue).await?;
            delete_limits(&connection, &queue, jobs, held_at_most).await?;
            anyhow::ensure!(
                !throttled,
                "a job of the {capped:?} drain waited for its limit, so the drain measured \
                 the limit, not its cost: give each key fewer jobs (--quick) or more keys"
            );
        }
    }
    backend.close().await;

    let [none, queue, both, rated] = {
        let mut capped = Capped::ALL.into_iter();
        rounds.map(|rounds| rounds.row(capped.next().expect("one per cap").label()))
    };
    let rows: Vec<Row> = vec![
        queue.clone().against(&none, None),
        queue.cpu_against(&none, None),
        both.clone().against(&none, None),
        both.cpu_against(&none, None),
        rated.clone().against(&none, None),
        rated.cpu_against(&none, None),
    ];
    Ok(Report {
        rows: [none, queue, both, rated].into_iter().chain(rows).collect(),
        details: vec![format!(
            "caps: {jobs} pre-published no-op jobs per drain and round, {} rounds (median shown), prefetch {PREFETCH}, native no-op handler, `WorkerConfig::default()` (64 jobs at once) with caps of {LIMIT} and a rate of {RATE}/s on each of {} keys (buckets of {} full at the start), which never bind; cpu/job is the process's user + system CPU over the drain per job",
            sizes.rounds,
            rated_keys(jobs).0,
            rated_keys(jobs).1,
        )],
    })
}

/// Whether `queue` exists.
async fn exists(connection: &lapin::Connection, queue: &str) -> anyhow::Result<bool> {
    let channel = connection.create_channel().await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await;
    if declared.is_ok() {
        let _ = channel.close(200, "done".into()).await;
    }
    Ok(declared.is_ok())
}

/// Delete the permit and token queues a drain of `jobs` jobs on `queue` made, so the run
/// leaves the broker as found (a leader queue goes with its last consumer).
async fn delete_limits(
    connection: &lapin::Connection,
    queue: &str,
    jobs: usize,
    held_at_most: Duration,
) -> anyhow::Result<()> {
    let permits = [
        Permits::for_queue(queue, LIMIT, held_at_most).name,
        Permits::for_key(NOOP_JOB, None, LIMIT, held_at_most).name,
    ];
    for name in permits
        .into_iter()
        .chain(buckets(jobs).map(|tokens| tokens.name))
    {
        let channel = connection.create_channel().await?;
        channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await?;
        let _ = channel.close(200, "done".into()).await;
    }
    Ok(())
}
