//! A new version on probation beside the old one, with native handlers under a paused
//! clock: a version that fails 30% of its share is rolled back as soon as it ran its
//! minimum, and the old one served every other delivery; a version that does as well is
//! promoted once its window has passed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobhost_sdk::{JobError, QueueConfig, RetryPolicy};
use serde_json::json;

use super::tests::manifest;
use crate::grants::Probation;
use crate::job::{Outcome, PluginChange};
use crate::testing::{Harness, native_unit};
use crate::worker::{Unit, Verdicts, WorkerConfig, on_probation};

/// One attempt per job, so every failure is counted once.
fn queue() -> QueueConfig {
    let mut queue = QueueConfig::new("q");
    queue.retry = RetryPolicy::fixed(1, Duration::from_secs(1));
    queue
}

/// Version `version` of plugin file `billing`, counting its calls in `calls`, failing
/// each call whose count modulo 10 is below `fail_in_10`.
fn version(version: &str, calls: &Arc<AtomicUsize>, fail_in_10: usize) -> Unit {
    let calls = Arc::clone(calls);
    let unit = native_unit(
        "billing",
        manifest("billing", queue(), &["bill"]),
        move |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            if n % 10 < fail_in_10 {
                Outcome::Failed(JobError::retryable("declined"))
            } else {
                Outcome::Completed { follow_ups: vec![] }
            }
        },
    );
    Unit::new(
        unit.key(),
        version,
        unit.manifest().clone(),
        Arc::clone(unit.handler()),
    )
}

/// What a trial reported.
fn reported() -> (Verdicts, Arc<Mutex<Vec<PluginChange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let report: Verdicts = Arc::new(move |_file, change| kept.lock().expect("ok").push(change));
    (report, seen)
}

/// One delivery at a time, so the share is exact.
fn one_at_a_time() -> WorkerConfig {
    WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_version_failing_30_percent_of_its_share_is_rolled_back_and_the_old_one_served_the_rest()
{
    let (old_calls, new_calls) = (Arc::default(), Arc::default());
    let old = version("v1", &old_calls, 0);
    let h = Harness::start([old.clone()], one_at_a_time()).await;
    let rules = Probation {
        share: 0.1,
        window: Duration::from_secs(3600),
        margin: 0.1,
        min_jobs: 10,
    };
    let (report, seen) = reported();
    let trial = on_probation(
        old,
        version("v2", &new_calls, 3),
        rules,
        h.plugins.clone(),
        report,
    );
    h.plugins.install(trial).expect("the trial installs");

    for n in 0..300 {
        h.enqueue("bill", json!({ "n": n })).await;
    }
    h.run_until_idle().await;

    assert_eq!(
        new_calls.load(Ordering::SeqCst),
        10,
        "the new version took every 10th delivery until it had run its minimum"
    );
    assert_eq!(
        old_calls.load(Ordering::SeqCst),
        290,
        "the old version served the rest"
    );
    let seen = seen.lock().expect("ok").clone();
    let [
        PluginChange::RolledBack {
            old, new, cause, ..
        },
    ] = seen.as_slice()
    else {
        panic!("one verdict, a rollback: {seen:?}");
    };
    assert_eq!((old.as_str(), new.as_str()), ("v1", "v2"));
    assert!(
        cause.contains("failed 30% of 10 attempts, the old one 0% of 90"),
        "{cause}"
    );
    let serving = h.plugins.current();
    let unit = serving.units().next().expect("one unit");
    assert_eq!((unit.version(), unit.incumbent().is_none()), ("v1", true));
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_version_that_does_as_well_is_promoted_once_its_window_has_passed() {
    let (old_calls, new_calls) = (Arc::default(), Arc::default());
    let old = version("v1", &old_calls, 1);
    let h = Harness::start([old.clone()], one_at_a_time()).await;
    let rules = Probation {
        share: 0.5,
        window: Duration::from_secs(60),
        margin: 0.05,
        min_jobs: 5,
    };
    let (report, seen) = reported();
    let trial = on_probation(
        old,
        version("v2", &new_calls, 1),
        rules,
        h.plugins.clone(),
        report,
    );
    h.plugins.install(trial).expect("the trial installs");

    for n in 0..40 {
        h.enqueue("bill", json!({ "n": n })).await;
    }
    h.run_until_idle().await;
    assert!(
        seen.lock().expect("ok").is_empty(),
        "no verdict inside the window"
    );
    assert_eq!(new_calls.load(Ordering::SeqCst), 20, "half the deliveries");

    tokio::time::advance(Duration::from_secs(61)).await;
    for n in 0..20 {
        h.enqueue("bill", json!({ "n": n })).await;
    }
    h.run_until_idle().await;
    let seen = seen.lock().expect("ok").clone();
    assert!(
        matches!(seen.as_slice(), [PluginChange::Promoted { new, .. }] if new == "v2"),
        "{seen:?}"
    );
    let serving = h.plugins.current();
    let unit = serving.units().next().expect("one unit");
    assert_eq!((unit.version(), unit.incumbent().is_none()), ("v2", true));
    assert_eq!(
        new_calls.load(Ordering::SeqCst) + old_calls.load(Ordering::SeqCst),
        60,
        "every delivery ran once, on one version"
    );
    assert!(
        old_calls.load(Ordering::SeqCst) <= 21,
        "after the verdict the new version serves everything"
    );
    h.shutdown().await;
}
