//! The client commands: `enqueue`, `plugins`, `policy` and `dead`.
//!
//! With `--amqp`/AMQP_URL, `enqueue` and `dead` talk to RabbitMQ directly; everything else
//! (and everything on the in-memory broker, which lives inside the host) goes through the
//! running host's admin API.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use jobhost::admin::api::{
    BackoffView, BindingView, CapView, DeadLetterList, EnqueueRequest, Enqueued, GrantsView,
    PluginView, PolicyReport, PolicyView, PurgeReport, RateView, UniqueRequest, millis,
};
use jobhost::admin::{self, AdminClient};
use jobhost::broker::{DeadLetters, RabbitMqBackend, RabbitMqOptions};
use jobhost::grants::Pin;
use jobhost::job::Deadline;
use jobhost::policy::Granularity;
use jobhost::producer::EnqueueOptions;
use jobhost_sdk::QueueConfig;
use serde::Serialize;

use super::table::{duration, render};
use super::{ClientArgs, DeadAction, EnqueueArgs, PolicyArgs, broker_access, paths};

/// How long a client command waits out a broker outage before it fails.
const BROKER_PATIENCE: Duration = Duration::from_secs(5);

/// `jobhost enqueue JOB_TYPE JSON`.
pub(super) async fn enqueue(args: EnqueueArgs) -> anyhow::Result<()> {
    if args.batch {
        return super::batches::enqueue(args).await;
    }
    let client = admin_client(&args.client)?;
    let enqueued = match args.client.broker.amqp() {
        None => {
            let request = EnqueueRequest {
                job_type: args.job_type.clone(),
                payload: args.payload.clone(),
                delay_ms: args.delay.map(millis),
                expires_in_ms: args.expires_in.map(millis),
                unique: unique(&args).map(|(key, for_)| UniqueRequest {
                    key: key.to_owned(),
                    for_ms: millis(for_),
                }),
                traceparent: args.traceparent.as_ref().map(|t| t.parent.to_string()),
            };
            client.enqueue(&request).await?
        }
        Some(url) => {
            let queue = match &args.queue {
                Some(queue) => QueueConfig::new(queue.as_str()),
                None => QueueConfig::from(
                    &client
                        .policy(&args.job_type)
                        .await
                        .context(
                            "pass `--queue QUEUE`, or start the host, which knows each job's queue",
                        )?
                        .queue,
                ),
            };
            let broker = connect(&url, &args.client).await?;
            admin::enqueue(
                &broker,
                &queue,
                &args.job_type,
                &args.payload,
                options(&args),
                Granularity::default(),
            )
            .await
            .with_context(|| format!("cannot enqueue on `{}`", queue.name))?
        }
    };
    if args.client.json {
        return print_json(&enqueued);
    }
    println!("{}", enqueued_line(&args.job_type, &enqueued));
    Ok(())
}

/// What `jobhost enqueue` says of the job it enqueued.
fn enqueued_line(job_type: &str, enqueued: &Enqueued) -> String {
    let delay = enqueued
        .delay_ms
        .map(|ms| format!(", delivered in {}", duration(ms)))
        .unwrap_or_default();
    let expires = enqueued
        .expires_at_ms
        .map(|ms| format!(", expires at {}", Deadline::from_epoch_ms(ms)))
        .unwrap_or_default();
    let trace = enqueued
        .trace_id
        .as_deref()
        .map(|trace_id| format!(", trace {trace_id}"))
        .unwrap_or_default();
    format!(
        "enqueued {job_type} as job {} on queue {}{delay}{expires}{trace}",
        enqueued.job_id, enqueued.queue
    )
}

/// What `enqueue`'s flags ask of a job published straight to the broker.
fn options(args: &EnqueueArgs) -> EnqueueOptions {
    let mut options = EnqueueOptions::new();
    if let Some(delay) = args.delay {
        options = options.delay(delay);
    }
    if let Some(expires_in) = args.expires_in {
        options = options.expires_in(expires_in);
    }
    if let Some((key, for_)) = unique(args) {
        options = options.unique(key, for_);
    }
    if let Some(trace) = &args.traceparent {
        options = options.trace(trace.clone());
    }
    options
}

/// `--unique KEY --unique-for DURATION`, which clap requires together.
fn unique(args: &EnqueueArgs) -> Option<(&str, Duration)> {
    Some((args.unique.as_deref()?, args.unique_for?))
}

/// `jobhost plugins`.
pub(super) async fn plugins(args: ClientArgs) -> anyhow::Result<()> {
    let plugins = admin_client(&args)?.plugins().await?;
    if args.json {
        return print_json(&plugins);
    }
    if plugins.is_empty() {
        println!(
            "no plugin is loaded: build one with `jobhost build`, or drop a *.wasm into the plugin directory"
        );
        return Ok(());
    }
    for plugin in &plugins {
        print_plugin(plugin);
    }
    Ok(())
}

fn print_plugin(plugin: &PluginView) {
    println!(
        "{} (version {}, {})",
        plugin.name, plugin.version, plugin.file
    );
    if let Some(old) = &plugin.on_probation_against {
        println!("on probation: version {old} serves the rest of the deliveries until a verdict");
    }
    println!("{}", queue_table(plugin));
    println!("{}", job_table(plugin));
    if let Some(binding) = &plugin.binding {
        println!("{}", bound(binding));
    }
    println!("{}\n", grants(plugin.grants.as_ref()));
}

/// The queues `plugin` declares, with their settings and fleet-wide limits.
fn queue_table(plugin: &PluginView) -> String {
    let queues: Vec<Vec<String>> = plugin
        .queues
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.queue_type.to_string(),
                q.prefetch.to_string(),
                q.max_priority.to_string(),
                q.timeout_ms.map_or_else(|| "-".to_owned(), duration),
                describe(&q.retry),
                concurrency(q.concurrency.as_ref()),
                rate(q.rate.as_ref()),
            ]
        })
        .collect();
    render(
        &[
            "Queue",
            "Type",
            "Prefetch",
            "Max priority",
            "Timeout",
            "Retry",
            "Concurrency",
            "Rate",
        ],
        &queues,
    )
}

/// The job types `plugin` handles, with their effective policies and fleet-wide limits.
fn job_table(plugin: &PluginView) -> String {
    let jobs: Vec<Vec<String>> = plugin
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.name.clone(),
                j.queue.clone(),
                describe(&j.policy),
                format!("{:?}", j.source).to_lowercase(),
                concurrency(j.concurrency.as_ref()),
                rate(j.rate.as_ref()),
            ]
        })
        .collect();
    render(
        &[
            "Job type",
            "Queue",
            "Effective policy",
            "From",
            "Concurrency",
            "Rate",
        ],
        &jobs,
    )
}

/// A fleet-wide concurrency cap and where it is set, or `-`.
fn concurrency(cap: Option<&CapView>) -> String {
    cap.map_or_else(
        || "-".to_owned(),
        |cap| format!("{} ({})", cap.describe(), cap.from),
    )
}

/// A fleet-wide rate limit and where it is set, or `-`.
fn rate(limit: Option<&RateView>) -> String {
    limit.map_or_else(
        || "-".to_owned(),
        |limit| format!("{} ({})", limit.describe(), limit.from),
    )
}

/// Which section of the grants file a plugin's file binds it to, and its pin.
fn bound(binding: &BindingView) -> String {
    let pin = match binding.pin {
        Pin::Unpinned => "not pinned",
        Pin::Matches => "pinned, matches",
        Pin::Mismatch => {
            "PINNED TO ANOTHER BINARY: it runs without its grants until the pin is updated"
        }
    };
    format!(
        "Grants section: [plugins.{section}], by its file {section}.wasm; sha256 {}, {pin}",
        binding.sha256,
        section = binding.section,
    )
}

/// A plugin's grants: origins, limits, and the names (never the values) of its config
/// values and secrets.
fn grants(grants: Option<&GrantsView>) -> String {
    let Some(grants) = grants else {
        return "Grants: none (no section for it in the grants file): no outbound requests, \
                no config values, no secrets"
            .to_owned();
    };
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    let secrets = grants
        .secrets
        .iter()
        .map(|s| format!("{} ({} {})", s.key, s.source, s.from))
        .collect();
    let trust = match &grants.ca_certificates {
        Some(file) => format!("the webpki roots and the CAs in {file}"),
        None => "the webpki roots".to_owned(),
    };
    format!(
        "Grants: outbound to {}\n        at most {} requests at once, {} bytes per response, \
         {} per request\n        https trusts {trust}\n        config keys: {}; secrets: {}",
        list(grants.allowed_outbound_hosts.clone()),
        grants.max_concurrent_requests,
        grants.max_response_bytes,
        duration(grants.request_timeout_ms),
        list(grants.config_keys.clone()),
        list(secrets),
    )
}

/// `3 attempts, exponential 1s..300s x2, jitter`.
fn describe(policy: &PolicyView) -> String {
    let attempts = match policy.max_attempts {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    let backoff = match &policy.backoff {
        BackoffView::None => "no wait".to_owned(),
        BackoffView::Fixed { delay_ms } => format!("fixed {}", duration(*delay_ms)),
        BackoffView::Exponential {
            base_ms,
            factor,
            max_ms,
            jitter,
        } => format!(
            "exponential {}..{} x{factor}{}",
            duration(*base_ms),
            duration(*max_ms),
            if *jitter { ", full jitter" } else { "" }
        ),
    };
    if policy.max_attempts <= 1 {
        attempts
    } else {
        format!("{attempts}, {backoff}")
    }
}

/// `jobhost policy JOB_TYPE`.
pub(super) async fn policy(args: PolicyArgs) -> anyhow::Result<()> {
    let report = admin_client(&args.client)?.policy(&args.job_type).await?;
    if args.client.json {
        return print_json(&report);
    }
    print_policy(&report);
    Ok(())
}

fn print_policy(report: &PolicyReport) {
    println!(
        "{} on queue {} (plugin {})",
        report.job_type, report.queue.name, report.plugin
    );
    println!(
        "policy: {}, from {}",
        describe(&report.policy),
        report.source.describe()
    );
    for cap in [&report.concurrency, &report.queue.concurrency]
        .into_iter()
        .flatten()
    {
        println!("concurrency: {}", concurrency(Some(cap)));
    }
    for limit in [&report.rate, &report.queue.rate].into_iter().flatten() {
        println!("rate: {}", rate(Some(limit)));
    }
    let rows: Vec<Vec<String>> = report
        .schedule
        .iter()
        .map(|row| {
            let attempt = if row.and_later {
                format!("{} and later", row.failed_attempt)
            } else {
                row.failed_attempt.to_string()
            };
            let cap = if row.capped { " (the cap)" } else { "" };
            vec![attempt, format!("{}{cap}", duration(row.computed_wait_ms))]
        })
        .collect();
    println!("{}", render(&["Failed attempt", "Computed wait"], &rows));
    let max = report.policy.max_attempts;
    match max {
        1 => println!("One attempt: the first failure dead-letters the job, no wait is used."),
        _ => println!(
            "Attempt {max} is the last: when it fails the job is dead-lettered, so the waits \
             after failed attempts 1 to {} are the ones used.",
            max - 1
        ),
    }
    if let BackoffView::Exponential { jitter: true, .. } = report.policy.backoff {
        println!("With jitter, each wait is drawn uniformly from [0, computed wait].");
    }
}

/// `jobhost dead list|replay|purge QUEUE`.
pub(super) async fn dead(action: DeadAction) -> anyhow::Result<()> {
    match action {
        DeadAction::List {
            client,
            queue,
            limit,
        } => {
            let letters = match client.broker.amqp() {
                Some(url) => {
                    connect(&url, &client)
                        .await?
                        .list_dead(&queue, limit)
                        .await?
                }
                None => admin_client(&client)?.dead_letters(&queue, limit).await?,
            };
            if client.json {
                return print_json(&letters);
            }
            print_dead_letters(&queue, &letters);
        }
        DeadAction::Replay { client, queue } => {
            let report = match client.broker.amqp() {
                Some(url) => connect(&url, &client).await?.replay_dead(&queue).await?,
                None => admin_client(&client)?.replay_dead_letters(&queue).await?,
            };
            if client.json {
                return print_json(&report);
            }
            println!(
                "replayed {} dead letter(s) of {queue} as attempt 1; {} that are not jobs stay dead",
                report.replayed, report.skipped
            );
        }
        DeadAction::Purge { client, queue } => {
            let report = match client.broker.amqp() {
                Some(url) => PurgeReport {
                    purged: connect(&url, &client).await?.purge_dead(&queue).await?,
                },
                None => admin_client(&client)?.purge_dead_letters(&queue).await?,
            };
            if client.json {
                return print_json(&report);
            }
            println!("purged {} dead letter(s) of {queue}", report.purged);
        }
    }
    Ok(())
}

fn print_dead_letters(queue: &str, list: &DeadLetterList) {
    if list.letters.is_empty() && list.left_out == 0 {
        println!("no dead letters in {queue}");
        return;
    }
    let rows: Vec<Vec<String>> = list
        .letters
        .iter()
        .map(|letter| {
            let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
            vec![
                or_dash(letter.job_id.map(|id| id.to_string())),
                or_dash(letter.job_type.clone()),
                or_dash(letter.attempts.map(|a| a.to_string())),
                or_dash(letter.reason.clone()),
            ]
        })
        .collect();
    println!(
        "{}",
        render(&["Job id", "Job type", "Attempts", "Reason"], &rows)
    );
    if list.left_out > 0 {
        let why = if list.capped {
            "the listing's size cap"
        } else {
            "--limit"
        };
        println!(
            "{} more of {} not listed ({why}); `--json` shows each letter's headers and the start of its body",
            list.left_out, list.present
        );
    }
}

/// The running host's admin API, with its token when the token file is there.
pub(super) fn admin_client(args: &ClientArgs) -> anyhow::Result<AdminClient> {
    let client = AdminClient::new(&args.admin);
    let file = paths::token_file(args.token.admin_token_file.as_deref(), &args.admin)?;
    Ok(match paths::read_token(&file)? {
        Some(token) => client.with_token(token),
        None => client,
    })
}

pub(super) async fn connect(url: &str, args: &ClientArgs) -> anyhow::Result<Arc<RabbitMqBackend>> {
    let options = RabbitMqOptions::default()
        .connection_name("jobhost-cli")
        .outage_timeout(BROKER_PATIENCE);
    let options = broker_access::broker_options(&args.broker, options)?;
    let backend = RabbitMqBackend::connect(url, options)
        .await
        .context("cannot connect to RabbitMQ")?;
    Ok(Arc::new(backend))
}

pub(super) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
