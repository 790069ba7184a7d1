//! A new plugin version on probation beside the old one (docs/replay.md, "Canary reloads").
//!
//! # Contract
//! - While on trial, every `round(1 / share)`-th delivery of the plugin's job types runs on
//!   the new version and the rest on the old one, each in its own fresh instance; the old
//!   version's manifest (queues, policies, limits) applies to both.
//! - Each version's attempts are counted, a failure being any attempt that ends otherwise
//!   than completed or deferred. Once the new version ran `min_jobs` attempts, a failure
//!   rate above the old one's plus `margin` rolls it back at once; otherwise, once
//!   `window` has passed, it is promoted. Either verdict installs the winner alone in the
//!   registry, logs why, and is reported as a [`PluginChange`].
//! - A host judges its own share: on several hosts, each runs its own trial of the version
//!   it loaded, and each reaches its own verdict.
//! - A rolled-back version stays out until its file changes again or the host restarts
//!   (which loads the file as it is, with nothing to judge it against).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::handler::{BoxFuture, Handler};
use super::registry::{Plugins, Unit};
use crate::grants::Probation;
use crate::job::{Invocation, Outcome, PluginChange};

/// Where a trial reports its verdict.
pub type Verdicts = Arc<dyn Fn(&str, PluginChange) + Send + Sync>;

/// `candidate` on probation against `incumbent` under `rules`: the unit to install in
/// their place, which installs the winner in `plugins` at the verdict and tells `report`.
pub fn on_probation(
    incumbent: Unit,
    candidate: Unit,
    rules: Probation,
    plugins: Plugins,
    report: Verdicts,
) -> Unit {
    static TRIALS: AtomicU64 = AtomicU64::new(1);
    let id = TRIALS.fetch_add(1, Ordering::Relaxed);
    // The share as a period: 0.1 is every 10th delivery, exactly, whatever the traffic.
    let every = (1.0 / rules.share).round().max(1.0) as u64;
    let trial = Trial {
        id,
        incumbent: incumbent.clone(),
        candidate: candidate.clone(),
        rules,
        every,
        started: Instant::now(),
        plugins,
        report,
        tally: Mutex::new(Tally::default()),
    };
    candidate.on_trial(id, incumbent, Arc::new(trial))
}

struct Trial {
    id: u64,
    incumbent: Unit,
    candidate: Unit,
    rules: Probation,
    every: u64,
    started: Instant,
    plugins: Plugins,
    report: Verdicts,
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    deliveries: u64,
    old: Counts,
    new: Counts,
    /// Whether the new version won, once decided.
    verdict: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    attempts: u32,
    failed: u32,
}

impl Counts {
    fn rate(self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            f64::from(self.failed) / f64::from(self.attempts)
        }
    }

    fn shown(self) -> String {
        format!("{:.0}% of {} attempts", self.rate() * 100.0, self.attempts)
    }
}

impl Handler for Trial {
    fn invoke<'a>(&'a self, job: Invocation<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let to_new = {
                let mut tally = self.lock();
                tally.verdict.unwrap_or_else(|| {
                    tally.deliveries += 1;
                    tally.deliveries.is_multiple_of(self.every)
                })
            };
            let unit = if to_new {
                &self.candidate
            } else {
                &self.incumbent
            };
            let outcome = unit.handler().invoke(job).await;
            self.count(to_new, &outcome);
            outcome
        })
    }
}

impl Trial {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Count an attempt of the new (`to_new`) or old version, and reach the verdict when
    /// the rules say so.
    fn count(&self, to_new: bool, outcome: &Outcome) {
        let failed = !matches!(
            outcome,
            Outcome::Completed { .. } | Outcome::Failed(jobhost_sdk::JobError::Deferred { .. })
        );
        let verdict = {
            let mut tally = self.lock();
            if tally.verdict.is_some() {
                return;
            }
            let counts = if to_new {
                &mut tally.new
            } else {
                &mut tally.old
            };
            counts.attempts += 1;
            counts.failed += u32::from(failed);
            let verdict = self.judge(&tally);
            if let Some((promoted, _)) = &verdict {
                tally.verdict = Some(*promoted);
            }
            verdict
        };
        if let Some((promoted, cause)) = verdict {
            self.conclude(promoted, cause);
        }
    }

    /// The verdict the counts give now, with why: rolled back as soon as the new version's
    /// failure rate passes the old one's by more than the margin, promoted once the window
    /// has passed; none before `min_jobs` attempts of the new version.
    fn judge(&self, tally: &Tally) -> Option<(bool, String)> {
        let (old, new) = (tally.old, tally.new);
        if new.attempts < self.rules.min_jobs {
            return None;
        }
        let why = format!(
            "the new version failed {}, the old one {}; the margin is {:.0} points",
            new.shown(),
            old.shown(),
            self.rules.margin * 100.0
        );
        if new.rate() > old.rate() + self.rules.margin {
            return Some((false, why));
        }
        (self.started.elapsed() >= self.rules.window).then_some((true, why))
    }

    fn conclude(&self, promoted: bool, cause: String) {
        let plugin = self.candidate.name().to_owned();
        let (old, new) = (
            self.incumbent.version().to_owned(),
            self.candidate.version().to_owned(),
        );
        let winner = if promoted {
            &self.candidate
        } else {
            &self.incumbent
        };
        if !self.plugins.end_trial(self.id, winner.clone()) {
            return;
        }
        let change = if promoted {
            tracing::info!(%plugin, %old, %new, %cause, "plugin version promoted after its probation");
            PluginChange::Promoted { plugin, old, new }
        } else {
            tracing::warn!(%plugin, %old, %new, %cause, "plugin version on probation rolled back: the old version serves everything again");
            PluginChange::RolledBack {
                plugin,
                old,
                new,
                cause,
            }
        };
        (self.report)(self.candidate.key(), change);
    }
}
