//! `/metrics` counts what the host did: a known mix of jobs moves every counter by exactly
//! what it should, each plugin load is counted by its outcome, and `jobhost run` serves
//! the text as Prometheus text, its loader's and its engine's metrics included.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use jobhost::activity::Activity;
use jobhost::admin::{self, AdminAccess, AdminState};
use jobhost::broker::{Backend, MemoryBackend};
use jobhost::envelope::Envelope;
use jobhost::job::PluginChange;
use jobhost::job::{Invocation, JobSpec, Manifest, Outcome};
use jobhost::metrics::{self, Metrics};
use jobhost::plugin::{Engine, EngineConfig};
use jobhost::policy::Granularity;
use jobhost::reload::Loader;
use jobhost::telemetry::Telemetry;
use jobhost::testing::{Harness, native_unit};
use jobhost::worker::{Fleet, Plugins, WorkerConfig};
use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::support::cli;

const QUEUE: &str = "metered";

/// One queue retrying twice at most; `ok` completes, `flaky` fails its first attempt,
/// `later` defers its first delivery, `bad` fails fatally and `doomed` always fails.
fn mixed_unit() -> jobhost::worker::Unit {
    let mut queue = QueueConfig::new(QUEUE);
    queue.retry = RetryPolicy::fixed(2, Duration::from_secs(2));
    let jobs = ["ok", "flaky", "later", "bad", "doomed"]
        .into_iter()
        .map(|name| JobSpec {
            name: name.into(),
            queue: QUEUE.into(),
            retry: None,
            timeout: None,
        })
        .collect();
    let manifest = Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: "mixed".into(),
        queues: vec![queue],
        jobs,
    };
    native_unit("mixed", manifest, |job: &Invocation<'_>| {
        let failure = match (job.job_type, job.attempt, job.deferrals) {
            ("flaky", 1, _) | ("doomed", _, _) => JobError::retryable("busy"),
            ("later", _, 0) => JobError::deferred(Duration::from_secs(3)),
            ("bad", _, _) => JobError::fatal("invalid"),
            _ => return Outcome::Completed { follow_ups: vec![] },
        };
        Outcome::Failed(failure)
    })
}

/// Every sample of a scrape, by its name and labels, leaving out comments.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            (series.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// What moved between two scrapes, among the counters and histogram counts.
fn deltas(before: &str, after: &str) -> BTreeMap<String, f64> {
    let before = samples(before);
    samples(after)
        .into_iter()
        .filter(|(series, _)| {
            let name = series.split('{').next().unwrap_or(series);
            name.ends_with("_total") || name.ends_with("_count")
        })
        .map(|(series, value)| {
            let delta = value - before.get(&series).copied().unwrap_or(0.0);
            (series, delta)
        })
        .filter(|(_, delta)| *delta != 0.0)
        .collect()
}

/// The series of `jobhost_jobs_total` for `job_type` settled as `outcome`.
fn jobs(job_type: &str, outcome: &str) -> String {
    format!(r#"jobhost_jobs_total{{queue="{QUEUE}",job_type="{job_type}",outcome="{outcome}"}}"#)
}

/// The count of `jobhost_{what}_duration_seconds` for `job_type`.
fn histogram(what: &str, job_type: &str) -> String {
    format!(r#"jobhost_{what}_duration_seconds_count{{job_type="{job_type}"}}"#)
}

#[tokio::test(start_paused = true)]
async fn a_known_mix_of_jobs_moves_every_counter_by_exactly_its_share() {
    let metrics = Metrics::new();
    let config = WorkerConfig {
        telemetry: Telemetry::builder().attach(metrics.clone()).build(),
        ..WorkerConfig::default()
    };
    let h = Harness::start([mixed_unit()], config).await;
    // Something counted before the first scrape, so the deltas are not just the totals.
    h.enqueue("ok", json!({})).await;
    h.run_until_idle().await;
    let before = metrics.encode();

    let mix = [
        ("ok", 3),
        ("flaky", 2),
        ("later", 2),
        ("bad", 2),
        ("doomed", 1),
    ];
    for (job_type, times) in mix {
        for _ in 0..times {
            h.enqueue(job_type, json!({})).await;
        }
    }
    let mut stranger = h.enqueue("ok", json!({"stranger": true})).await;
    stranger.job_type = "made.up.by.a.producer".into();
    h.backend.publish(&stranger, None).await.expect("publish");
    h.run_until_idle().await;
    let after = metrics.encode();

    // Per job type: its deliveries settled as completed, retried, deferred and
    // dead-lettered, and its handler runs. The stranger's `ok` twin, enqueued first, is
    // one more `ok`; the stranger itself counts as `other` and runs no handler.
    let per_type = [
        ("ok", [4, 0, 0, 0], 4),
        ("flaky", [2, 2, 0, 0], 4),
        ("later", [2, 0, 2, 0], 4),
        ("bad", [0, 0, 0, 2], 2),
        ("doomed", [0, 1, 0, 1], 2),
        ("other", [0, 0, 0, 1], 0),
    ];
    let mut expected = BTreeMap::new();
    for (job_type, settled, runs) in per_type {
        let outcomes = ["completed", "retried", "deferred", "dead_lettered"];
        for (outcome, count) in outcomes.into_iter().zip(settled) {
            expected.insert(jobs(job_type, outcome), f64::from(count));
        }
        let deliveries = settled.iter().sum::<u32>();
        expected.insert(histogram("delivery", job_type), f64::from(deliveries));
        expected.insert(histogram("job", job_type), f64::from(runs));
    }
    for (cause, count) in [("fatal", 2.0), ("max_attempts", 1.0), ("no_handler", 1.0)] {
        let series = format!(r#"jobhost_dead_letters_total{{queue="{QUEUE}",cause="{cause}"}}"#);
        expected.insert(series, count);
    }
    expected.retain(|_, delta| *delta != 0.0);
    assert_eq!(
        deltas(&before, &after),
        expected,
        "each counter moved by exactly its share of the mix, and no other moved"
    );
    assert_eq!(
        samples(&after).get("jobhost_jobs_in_flight"),
        Some(&0.0),
        "nothing is in flight once the worker is idle"
    );
    assert!(
        !after.contains("made.up.by.a.producer"),
        "a job type no manifest declares never becomes a label"
    );
    h.shutdown().await;
}

/// `GET /metrics` from the admin API at `addr`, as a scraper sends it (no token): the
/// answer's head and body.
fn scrape(addr: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads in time");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    (head.to_owned(), body.to_owned())
}

#[test]
fn jobhost_run_serves_its_metrics_as_prometheus_text_to_a_scraper_without_a_token() {
    let host = cli::Host::start(&["email-sender"]);
    let (head, body) = scrape(&host.admin);
    assert!(head.starts_with("HTTP/1.1 200"), "scraped: {head}");
    let content_type = format!("content-type: {}", metrics::CONTENT_TYPE);
    assert!(
        head.lines()
            .any(|line| line.eq_ignore_ascii_case(&content_type)),
        "the content type is Prometheus text 0.0.4: {head}"
    );
    let scraped = samples(&body);
    assert_eq!(
        scraped.get(r#"jobhost_plugin_loads_total{outcome="loaded"}"#),
        Some(&1.0),
        "the plugin loaded at start is counted:\n{body}"
    );
    assert_eq!(
        scraped.get("jobhost_instances_in_use"),
        Some(&0.0),
        "an idle host holds no instance:\n{body}"
    );
    assert_eq!(
        scraped.get(r#"jobhost_hold_queue_messages{queue="examples.emails"}"#),
        Some(&0.0),
        "the broker holds nothing for the plugin's queue yet:\n{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_queue_gauge_counts_what_waits_in_a_queues_hold_queues_at_the_scrape() {
    let backend = MemoryBackend::new();
    let plugins = Plugins::new();
    plugins.install(mixed_unit()).expect("the unit installs");
    for queue in plugins.current().queues() {
        backend.declare(queue).await.expect("declared");
    }
    let granularity = Granularity::default();
    for (job_type, delay) in [("flaky", Some(2)), ("later", Some(30)), ("ok", None)] {
        let envelope = Envelope::new(
            job_type,
            QUEUE,
            RawValue::from_string("{}".into()).expect("JSON"),
        );
        let delay = delay.map(|secs| granularity.round(Duration::from_secs(secs)).expect("fits"));
        backend.publish(&envelope, delay).await.expect("published");
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("its address");
    let state = AdminState {
        backend,
        plugins,
        granularity,
        access: AdminAccess::new("token", "127.0.0.1:0", addr),
        metrics: Metrics::new(),
        activity: Activity::default(),
        telemetry: Telemetry::none(),
        grants: jobhost::grants::SharedGrants::default(),
        fleet: Fleet::default(),
        batches: jobhost::batches::Board::default(),
    };
    let stop = CancellationToken::new();
    tokio::spawn(admin::serve(listener, state, stop.clone()));
    let (_, body) = tokio::task::spawn_blocking(move || scrape(&addr.to_string()))
        .await
        .expect("scraped");
    stop.cancel();
    assert_eq!(
        samples(&body).get(&format!(
            r#"jobhost_hold_queue_messages{{queue="{QUEUE}"}}"#
        )),
        Some(&2.0),
        "a retry and a deferral wait in two hold queues; the ready job is not held:\n{body}"
    );
}

#[tokio::test]
async fn each_plugin_load_is_counted_by_outcome_and_kept_in_the_reload_history_with_its_cause() {
    let (metrics, activity) = (Metrics::new(), Activity::default());
    let engine = Engine::new(EngineConfig::default()).expect("the engine starts");
    let telemetry = Telemetry::builder()
        .attach(metrics.clone())
        .attach(activity.clone())
        .build();
    let loader = Loader::new(engine, Plugins::new()).reporting(telemetry);
    let dir = tempfile::tempdir().expect("a plugin directory");
    let file = dir.path().join("plugin.wasm");
    for fixture in ["noop", "email-sender"] {
        std::fs::copy(jobhost_fixtures::wasm(fixture), &file).expect("the fixture copies");
        loader.sync(&file).await.expect("a fixture loads");
    }
    std::fs::write(&file, b"not a component").expect("written");
    loader.sync(&file).await.expect_err("garbage is refused");

    let scraped = samples(&metrics.encode());
    for outcome in ["loaded", "replaced", "refused"] {
        let series = format!(r#"jobhost_plugin_loads_total{{outcome="{outcome}"}}"#);
        assert_eq!(scraped.get(&series), Some(&1.0), "{series}");
    }

    std::fs::remove_file(&file).expect("removed");
    loader.sync(&file).await.expect("a removal unloads");
    let history = activity.reloads();
    let kinds: Vec<&str> = history
        .iter()
        .map(|event| match &event.change {
            PluginChange::Loaded { .. } => "loaded",
            PluginChange::Replaced { .. } => "replaced",
            PluginChange::Refused { .. } => "refused",
            PluginChange::Removed => "removed",
            other => unreachable!("the history keeps only news, not {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["removed", "refused", "replaced", "loaded"],
        "newest first"
    );
    let PluginChange::Refused { cause } = &history[1].change else {
        unreachable!("the second newest is the refusal")
    };
    assert!(
        cause.contains("plugin.wasm"),
        "the refusal names the file: {cause}"
    );
}
