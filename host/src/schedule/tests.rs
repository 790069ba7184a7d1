//! The scheduler on the memory backend under a paused clock: an hour of one-second ticks
//! in milliseconds, two schedulers sharing a backend, a leader stopped or killed mid-run,
//! a fleet down for a minute, and a daylight-saving change.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::DateTime;
use jobhost_sdk::QueueConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Clock, Endings, Scheduler};
use crate::broker::{Backend, MemoryBackend, Schedules, tick_job_id};
use crate::grants::{Grants, SharedGrants};
use crate::job::{JobSpec, Manifest, Outcome};
use crate::metrics::Metrics;
use crate::testing::native_unit;
use crate::worker::Plugins;

const QUEUE: &str = "reports";
const JOB_TYPE: &str = "reports.Tick";
const SECOND: i64 = 1000;

/// 2026-01-01T00:00:00.500Z: half a second before a tick, so ticks are whole seconds after.
const START: i64 = 1_767_225_600_500;

/// A plugin serving [`JOB_TYPE`] on [`QUEUE`]; the scheduler only routes to it.
fn plugins() -> Plugins {
    plugins_declaring(BTreeMap::new())
}

/// The manifest of a plugin serving [`JOB_TYPE`] on [`QUEUE`], declaring `schedules`.
fn manifest(schedules: BTreeMap<String, std::sync::Arc<crate::job::Schedule>>) -> Manifest {
    Manifest {
        limits: Default::default(),
        schedules,
        name: "reports".into(),
        queues: vec![QueueConfig::new(QUEUE)],
        jobs: vec![JobSpec {
            name: JOB_TYPE.into(),
            queue: QUEUE.into(),
            retry: None,
            timeout: None,
        }],
    }
}

/// [`plugins`], declaring `schedules`.
fn plugins_declaring(schedules: BTreeMap<String, std::sync::Arc<crate::job::Schedule>>) -> Plugins {
    let manifest = manifest(schedules);
    let plugins = Plugins::new();
    plugins
        .install(native_unit("reports", manifest, |_| Outcome::Completed {
            follow_ups: vec![],
        }))
        .expect("installs");
    plugins
}

fn grants(section: &str) -> SharedGrants {
    let text = format!("[schedules.tick]\njob_type = \"{JOB_TYPE}\"\n{section}\n");
    SharedGrants::new(Grants::parse(Path::new("jobhost.toml"), &text).expect("valid"))
}

/// A scheduler named `host` on `backend`, from `at_ms` on, until its token is cancelled.
fn start(
    backend: &MemoryBackend,
    grants: &SharedGrants,
    metrics: &Metrics,
    host: &str,
    at_ms: i64,
) -> (CancellationToken, JoinHandle<()>) {
    let scheduler = Scheduler::new(
        backend.clone(),
        grants.clone(),
        plugins(),
        metrics.telemetry(),
    )
    .with_clock(Clock::starting_at(at_ms))
    .with_host(host);
    let stop = CancellationToken::new();
    (stop.clone(), tokio::spawn(scheduler.run(stop)))
}

/// How many jobs each tick enqueued, by tick, from the job ids (which are per tick).
fn firings_per_tick(
    backend: &MemoryBackend,
    ticks: impl Iterator<Item = i64>,
) -> BTreeMap<i64, usize> {
    let ids: Vec<Uuid> = backend.pending(QUEUE).iter().map(|e| e.job_id).collect();
    ticks
        .map(|tick| {
            let id = tick_job_id("tick", tick);
            (tick, ids.iter().filter(|fired| **fired == id).count())
        })
        .collect()
}

/// The whole seconds after [`START`] through `seconds`.
fn ticks_through(seconds: i64) -> impl Iterator<Item = i64> {
    (1..=seconds).map(|s| START - 500 + s * SECOND)
}

fn metric(metrics: &Metrics, name: &str) -> u64 {
    let text = metrics.encode();
    text.lines()
        .find(|line| line.starts_with(&format!("{name}{{schedule=\"tick\"}}")))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

async fn stop(scheduler: (CancellationToken, JoinHandle<()>)) {
    scheduler.0.cancel();
    scheduler.1.await.expect("the scheduler ends");
}

#[tokio::test(start_paused = true)]
async fn a_one_second_schedule_fires_3600_times_in_an_hour_once_per_tick() {
    let (backend, metrics, grants) = (
        MemoryBackend::new(),
        Metrics::new(),
        grants("every = \"1s\""),
    );
    let scheduler = start(&backend, &grants, &metrics, "a", START);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    stop(scheduler).await;
    let fired = firings_per_tick(&backend, ticks_through(3600));
    assert!(
        fired.values().all(|n| *n == 1),
        "each tick fires once: {:?}",
        fired.iter().find(|(_, n)| **n != 1)
    );
    assert_eq!(
        backend.pending(QUEUE).len(),
        3600,
        "and nothing else is enqueued"
    );
    assert_eq!(metric(&metrics, "jobhost_schedule_firings_total"), 3600);
    let history = backend.firings("tick").await.expect("memory");
    let last = history.last().expect("a history");
    assert_eq!(
        (last.tick_ms, last.host.as_str()),
        (START - 500 + 3600 * SECOND, "a")
    );
    assert_eq!(history.len(), crate::broker::HISTORY);
}

#[tokio::test(start_paused = true)]
async fn two_schedulers_on_one_backend_still_fire_each_tick_once() {
    let (backend, grants) = (MemoryBackend::new(), grants("every = \"1s\""));
    let (a_metrics, b_metrics) = (Metrics::new(), Metrics::new());
    let a = start(&backend, &grants, &a_metrics, "a", START);
    let b = start(&backend, &grants, &b_metrics, "b", START);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    stop(a).await;
    stop(b).await;
    let fired = firings_per_tick(&backend, ticks_through(3600));
    assert!(
        fired.values().all(|n| *n == 1),
        "{:?}",
        fired.iter().find(|(_, n)| **n != 1)
    );
    assert_eq!(backend.pending(QUEUE).len(), 3600);
    let (a, b) = (
        metric(&a_metrics, "jobhost_schedule_firings_total"),
        metric(&b_metrics, "jobhost_schedule_firings_total"),
    );
    assert_eq!(a + b, 3600, "one leader fires: a {a}, b {b}");
}

/// Run `a` and `b` for ten minutes, stop the leader with `halt`, run ten more: every tick
/// fires once, and the other scheduler fired after the stop.
async fn a_leader_halted_mid_run(halt: fn((CancellationToken, JoinHandle<()>))) {
    let (backend, grants) = (MemoryBackend::new(), grants("every = \"1s\""));
    let metrics = Metrics::new();
    let a = start(&backend, &grants, &metrics, "a", START);
    let b = start(&backend, &grants, &metrics, "b", START);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let history = backend.firings("tick").await.expect("memory");
    let leader = history.last().expect("fired").host.clone();
    let (leader, other) = if leader == "a" { (a, b) } else { (b, a) };
    halt(leader);
    tokio::time::sleep(Duration::from_secs(600)).await;
    stop(other).await;
    let fired = firings_per_tick(&backend, ticks_through(1200));
    assert!(
        fired.values().all(|n| *n == 1),
        "{:?}",
        fired.iter().find(|(_, n)| **n != 1)
    );
    assert_eq!(backend.pending(QUEUE).len(), 1200);
    let last = backend.firings("tick").await.expect("memory");
    assert_ne!(
        last.last().map(|f| f.host.clone()),
        Some(history.last().expect("fired").host.clone()),
        "the other took over"
    );
    assert_eq!(
        metric(&metrics, "jobhost_schedule_missed_ticks_total"),
        0,
        "a takeover within ON_TIME misses nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_stops_is_replaced_and_no_tick_fires_twice() {
    a_leader_halted_mid_run(|(token, _)| token.cancel()).await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_killed_without_resigning_is_replaced_once_its_lease_ends() {
    a_leader_halted_mid_run(|(_, task)| task.abort()).await;
}

/// One scheduler for 100 s, none for a minute, another from 160.5 s: what the second fires.
async fn after_a_minute_down(missed: &str) -> (BTreeMap<i64, usize>, u64) {
    let (backend, metrics) = (MemoryBackend::new(), Metrics::new());
    let grants = grants(&format!("every = \"1s\"\nmissed = {missed}"));
    let first = start(&backend, &grants, &metrics, "a", START);
    tokio::time::sleep(Duration::from_secs(100)).await;
    stop(first).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let second = start(&backend, &grants, &metrics, "b", START + 160 * SECOND);
    tokio::time::sleep(Duration::from_secs(40)).await;
    stop(second).await;
    (
        firings_per_tick(&backend, ticks_through(200)),
        metric(&metrics, "jobhost_schedule_missed_ticks_total"),
    )
}

#[tokio::test(start_paused = true)]
async fn skip_lets_the_ticks_of_a_fleet_down_go_and_counts_them() {
    let (fired, missed) = after_a_minute_down("\"skip\"").await;
    let never: Vec<i64> = fired
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(t, _)| (t - START + 500) / SECOND)
        .collect();
    assert_eq!(
        never,
        (101..=155).collect::<Vec<_>>(),
        "ticks more than 5 s old when the host came back"
    );
    assert_eq!(missed, 55);
    assert!(fired.values().all(|n| *n <= 1));
}

#[tokio::test(start_paused = true)]
async fn catch_up_fires_the_last_n_missed_ticks_oldest_first() {
    let (fired, missed) = after_a_minute_down("{ catch_up = 3 }").await;
    let never: Vec<i64> = fired
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(t, _)| (t - START + 500) / SECOND)
        .collect();
    assert_eq!(never, (101..=152).collect::<Vec<_>>());
    assert_eq!(missed, 52);
    assert!(fired.values().all(|n| *n <= 1));
}

fn at(utc: &str) -> i64 {
    DateTime::parse_from_rfc3339(utc)
        .expect("RFC 3339")
        .timestamp_millis()
}

/// The jobs `30 2 * * *` in Europe/Paris enqueues from `from` (UTC) for `seconds`.
async fn half_past_two_in_paris(from: &str, seconds: u64) -> Vec<Uuid> {
    let backend = MemoryBackend::new();
    let grants = grants("cron = \"30 2 * * *\"\ntz = \"Europe/Paris\"");
    let scheduler = start(&backend, &grants, &Metrics::new(), "a", at(from));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop(scheduler).await;
    backend.pending(QUEUE).iter().map(|e| e.job_id).collect()
}

#[tokio::test(start_paused = true)]
async fn a_daily_time_lost_to_spring_forward_fires_once_at_the_end_of_the_gap() {
    // 2026-03-29: 02:00 CET becomes 03:00 CEST.
    let fired = half_past_two_in_paris("2026-03-29T00:59:00Z", 120).await;
    assert_eq!(
        fired,
        [tick_job_id("tick", at("2026-03-29T01:00:00Z"))],
        "03:00 CEST, once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_daily_time_repeated_by_fall_back_fires_once_on_its_first_occurrence() {
    // 2026-10-25: 03:00 CEST becomes 02:00 CET.
    let fired = half_past_two_in_paris("2026-10-25T00:29:00Z", 2 * 3600).await;
    assert_eq!(
        fired,
        [tick_job_id("tick", at("2026-10-25T00:30:00Z"))],
        "02:30 CEST only, not 02:30 CET"
    );
}

#[tokio::test(start_paused = true)]
async fn a_schedule_added_disabled_or_removed_in_the_grants_takes_effect_without_a_restart() {
    let (backend, metrics) = (MemoryBackend::new(), Metrics::new());
    let shared = grants("every = \"1s\"\nenabled = false");
    let scheduler = start(&backend, &shared, &metrics, "a", START);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(backend.pending(QUEUE).len(), 0, "disabled");
    let text = format!("[schedules.tick]\njob_type = \"{JOB_TYPE}\"\nevery = \"1s\"\n");
    shared.replace(Grants::parse(Path::new("jobhost.toml"), &text).expect("valid"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let fired = backend.pending(QUEUE).len();
    assert!((9..=11).contains(&fired), "enabled by the reload: {fired}");
    shared.replace(Grants::none("jobhost.toml"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(backend.pending(QUEUE).len(), fired, "removed by the reload");
    stop(scheduler).await;
}

#[tokio::test(start_paused = true)]
async fn a_schedule_enabled_again_does_not_catch_up_the_ticks_it_was_disabled_for() {
    let (backend, metrics) = (MemoryBackend::new(), Metrics::new());
    let text = |enabled: bool| {
        format!(
            "[schedules.tick]\njob_type = \"{JOB_TYPE}\"\nevery = \"1s\"\n\
             missed = {{ catch_up = 100 }}\nenabled = {enabled}\n"
        )
    };
    let parse = |text: String| Grants::parse(Path::new("jobhost.toml"), &text).expect("valid");
    let shared = SharedGrants::new(parse(text(true)));
    let scheduler = start(&backend, &shared, &metrics, "a", START);
    tokio::time::sleep(Duration::from_secs(10)).await;
    shared.replace(parse(text(false)));
    tokio::time::sleep(Duration::from_secs(30)).await;
    shared.replace(parse(text(true)));
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop(scheduler).await;
    let fired = firings_per_tick(&backend, ticks_through(50));
    let never = fired.values().filter(|n| **n == 0).count();
    assert!(
        (29..=31).contains(&never),
        "the disabled half minute stays unfired: {never}"
    );
    assert!(fired.values().all(|n| *n <= 1));
    assert_eq!(metric(&metrics, "jobhost_schedule_missed_ticks_total"), 0);
}

/// [`plugins`], its job type declaring `every = "1s"` under its own name.
fn declaring_plugins() -> Plugins {
    let declared = crate::job::Schedule {
        job_type: JOB_TYPE.into(),
        timing: crate::job::Timing::Every(Duration::from_secs(1)),
        payload: serde_json::json!({"declared": true}),
        missed: crate::job::Missed::Skip,
        enabled: true,
    };
    plugins_declaring(BTreeMap::from([(
        JOB_TYPE.to_owned(),
        std::sync::Arc::new(declared),
    )]))
}

#[tokio::test(start_paused = true)]
async fn a_schedule_a_plugin_declares_fires_once_per_tick_until_the_grants_file_disables_it() {
    let (backend, metrics) = (MemoryBackend::new(), Metrics::new());
    let empty = SharedGrants::new(Grants::none("jobhost.toml"));
    let scheduler = Scheduler::new(
        backend.clone(),
        empty.clone(),
        declaring_plugins(),
        metrics.telemetry(),
    )
    .with_clock(Clock::starting_at(START))
    .with_host("a");
    let stop_token = CancellationToken::new();
    let running = tokio::spawn(scheduler.run(stop_token.clone()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let ids: Vec<Uuid> = backend.pending(QUEUE).iter().map(|e| e.job_id).collect();
    let per_tick: Vec<usize> = ticks_through(10)
        .map(|tick| {
            let id = tick_job_id(JOB_TYPE, tick);
            ids.iter().filter(|fired| **fired == id).count()
        })
        .collect();
    assert_eq!(
        per_tick,
        vec![1; 10],
        "named after its job type, once per tick"
    );
    let payload = backend.pending(QUEUE)[0].payload.get().to_owned();
    assert_eq!(payload, r#"{"declared":true}"#, "the declared payload");

    // The operator's file disables it by its name, without a rebuild.
    let off = format!(
        "[schedules.\"{JOB_TYPE}\"]\njob_type = \"{JOB_TYPE}\"\nevery = \"1s\"\nenabled = false\n"
    );
    empty.replace(Grants::parse(Path::new("jobhost.toml"), &off).expect("valid"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = backend.pending(QUEUE).len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        backend.pending(QUEUE).len(),
        before,
        "disabled by the file: no more firings"
    );
    stop_token.cancel();
    running.await.expect("the scheduler ends");
}

#[tokio::test(start_paused = true)]
async fn each_firing_shows_how_its_job_ended_on_the_host_that_ran_it() {
    use crate::telemetry::Telemetry;
    use crate::testing::Harness;
    use crate::worker::WorkerConfig;

    let backend = MemoryBackend::new();
    // A job whose payload says `fail` is dead-lettered; any other completes.
    let unit = native_unit("reports", manifest(BTreeMap::new()), |job| {
        if String::from_utf8_lossy(job.payload).contains("fail") {
            Outcome::Failed(jobhost_sdk::JobError::fatal("the report failed"))
        } else {
            Outcome::Completed { follow_ups: vec![] }
        }
    });
    let text = format!(
        "[schedules.good]\njob_type = \"{JOB_TYPE}\"\nevery = \"1s\"\n\
         [schedules.bad]\njob_type = \"{JOB_TYPE}\"\nevery = \"1s\"\npayload = {{ fail = true }}\n"
    );
    let grants = SharedGrants::new(Grants::parse(Path::new("jobhost.toml"), &text).expect("valid"));
    // The file's schedules are in force whatever plugins are loaded.
    let endings = Endings::new(backend.clone(), grants.clone(), Plugins::new());
    let config = WorkerConfig {
        telemetry: Telemetry::none().with(endings),
        ..WorkerConfig::default()
    };
    let h = Harness::start_on(backend.clone(), [unit], config).await;
    let scheduler = Scheduler::new(
        backend.clone(),
        grants,
        h.plugins.clone(),
        Telemetry::none(),
    )
    .with_clock(Clock::starting_at(START))
    .with_host("a");
    let stop_token = CancellationToken::new();
    let running = tokio::spawn(scheduler.run(stop_token.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_token.cancel();
    running.await.expect("the scheduler ends");
    // A producer's job naming a schedule not in force records no ending, even beside a
    // firing of that name.
    let mut forged = h.enqueue(JOB_TYPE, serde_json::json!({})).await;
    forged.job_id = Uuid::new_v4();
    forged.schedule = Some("forged".to_owned());
    let firing = crate::broker::Firing {
        tick_ms: START,
        at_ms: START,
        host: "elsewhere".to_owned(),
        job_id: forged.job_id,
        ended: None,
    };
    backend.record("forged", &firing).await.expect("memory");
    h.backend.publish(&forged, None).await.expect("published");
    h.run_until_idle().await;
    let kept = backend.firings("forged").await.expect("memory");
    assert_eq!(kept[0].ended, None, "no ending for a schedule not in force");
    for (schedule, outcome) in [("good", "completed"), ("bad", "dead-lettered")] {
        let firings = backend.firings(schedule).await.expect("memory");
        assert_eq!(firings.len(), 3, "{schedule}: {firings:?}");
        for firing in &firings {
            let ended = firing.ended.as_ref().expect("each firing's job ended");
            assert_eq!(
                (ended.job_id, ended.outcome.as_str(), ended.attempt),
                (firing.job_id, outcome, 1),
                "{schedule}"
            );
        }
    }
    h.shutdown().await;
}
