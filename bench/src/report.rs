//! What a scenario measured, and the table the runner prints.
//!
//! A throughput or drain ratio is "ours over the reference" in the direction where higher
//! is better for jobhost: jobs/s over the reference's jobs/s, or the reference's drain
//! time over ours. A CPU ratio is our CPU per job over the reference's, where lower is
//! better, as the CPU target reads ("≤ 0.7x queuey", BENCHMARKS.md).

use std::fmt::Write as _;
use std::time::Duration;

/// Latency samples of one scenario.
#[derive(Debug, Default, Clone)]
pub(crate) struct Samples(Vec<Duration>);

impl Samples {
    pub(crate) fn new(samples: Vec<Duration>) -> Self {
        let mut samples = samples;
        samples.sort_unstable();
        Self(samples)
    }

    /// The samples, sorted.
    pub(crate) fn into_inner(self) -> Vec<Duration> {
        self.0
    }

    /// The `q`-quantile (0..=1) by nearest rank, `None` without samples.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let last = self.0.len().checked_sub(1)?;
        // Nearest rank: truncation is the intent.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((last as f64) * q).round() as usize;
        self.0.get(rank.min(last)).copied()
    }
}

/// What a scenario must reach against its reference.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// The ratio is at least this.
    RatioAtLeast(f64),
    /// The p50 latency is below this.
    P50Below(Duration),
    /// The CPU-per-job ratio is at most this.
    CpuRatioAtMost(f64),
}

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) jobs_per_s: Option<f64>,
    /// The consumer process's CPU time (user + system) per job.
    pub(crate) cpu_per_job: Option<Duration>,
    pub(crate) samples: Samples,
    /// The tail quantile shown in the second latency column (0.99 unless said).
    pub(crate) tail: f64,
    pub(crate) reference: Option<String>,
    pub(crate) ratio: Option<f64>,
    pub(crate) target: Option<Target>,
}

impl Row {
    /// A measurement without a reference.
    pub(crate) fn new(
        scenario: impl Into<String>,
        jobs_per_s: Option<f64>,
        samples: Samples,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            jobs_per_s,
            cpu_per_job: None,
            samples,
            tail: 0.99,
            reference: None,
            ratio: None,
            target: None,
        }
    }

    /// This row compared with `reference`: the ratio of their throughputs.
    pub(crate) fn against(mut self, reference: &Row, target: Option<Target>) -> Self {
        self.ratio = match (self.jobs_per_s, reference.jobs_per_s) {
            (Some(ours), Some(theirs)) if theirs > 0.0 => Some(ours / theirs),
            _ => None,
        };
        self.reference = Some(reference.scenario.clone());
        self.target = target;
        self
    }

    /// This row with the CPU time it took per job.
    pub(crate) fn cpu(mut self, per_job: Option<Duration>) -> Self {
        self.cpu_per_job = per_job;
        self
    }

    /// This row's CPU per job compared with `reference`'s, as a row of its own named
    /// `<scenario>, cpu/job` that shows the CPU alone, so the ratio is not read as a
    /// throughput ratio.
    pub(crate) fn cpu_against(&self, reference: &Row, target: Option<Target>) -> Self {
        let ratio = match (self.cpu_per_job, reference.cpu_per_job) {
            (Some(ours), Some(theirs)) if !theirs.is_zero() => {
                Some(ours.as_secs_f64() / theirs.as_secs_f64())
            }
            _ => None,
        };
        Self {
            scenario: format!("{}, cpu/job", self.scenario),
            jobs_per_s: None,
            cpu_per_job: self.cpu_per_job,
            samples: Samples::default(),
            tail: self.tail,
            reference: Some(reference.scenario.clone()),
            ratio,
            target,
        }
    }

    /// Show `tail` (e.g. 0.95) instead of p99.
    pub(crate) fn tail(mut self, tail: f64) -> Self {
        self.tail = tail;
        self
    }

    pub(crate) fn met(&self) -> Option<bool> {
        match self.target? {
            Target::RatioAtLeast(min) => self.ratio.map(|ratio| ratio >= min),
            Target::CpuRatioAtMost(max) => self.ratio.map(|ratio| ratio <= max),
            Target::P50Below(max) => self.samples.quantile(0.5).map(|p50| p50 < max),
        }
    }

    /// How far the row is on the good side of its target: what it reached over what the
    /// target asks, less one. 0.1 is 10% to spare, -0.2 is 80% of the way there; for an
    /// upper bound "reached" is the bound over the ratio, so -0.5 needs half the CPU.
    pub(crate) fn margin(&self) -> Option<f64> {
        match self.target? {
            Target::RatioAtLeast(min) => self.ratio.map(|ratio| ratio / min - 1.0),
            Target::CpuRatioAtMost(max) => self.ratio.map(|ratio| max / ratio - 1.0),
            Target::P50Below(max) => self
                .samples
                .quantile(0.5)
                .map(|p50| 1.0 - p50.as_secs_f64() / max.as_secs_f64()),
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    /// Measurements that are not rows: resources, retry details.
    pub(crate) details: Vec<String>,
}

impl Report {
    pub(crate) fn extend(&mut self, other: Report) {
        self.rows.extend(other.rows);
        self.details.extend(other.details);
    }

    /// The table, in Markdown so it can be pasted into BENCHMARKS.md as it is.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "| scenario | jobs/s | cpu/job | p50 | p99 | reference | ratio | target | met? |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---|---:|---|---|\n");
        for row in &self.rows {
            let tail = row.samples.quantile(row.tail).map(|d| {
                let label = if (row.tail - 0.99).abs() < f64::EPSILON {
                    String::new()
                } else if row.tail >= 1.0 {
                    " (max)".to_owned()
                } else {
                    format!(" (p{:.0})", row.tail * 100.0)
                };
                format!("{}{label}", millis(d))
            });
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.scenario,
                row.jobs_per_s.map_or("-".into(), |r| format!("{r:.0}")),
                row.cpu_per_job.map_or("-".into(), micros),
                row.samples.quantile(0.5).map_or("-".into(), millis),
                tail.unwrap_or_else(|| "-".into()),
                row.reference.as_deref().unwrap_or("-"),
                row.ratio.map_or("-".into(), |r| format!("{r:.2}x")),
                row.target.map_or("-".into(), describe),
                verdict(row.met(), row.margin()),
            );
        }
        if !self.details.is_empty() {
            out.push('\n');
            for line in &self.details {
                let _ = writeln!(out, "- {line}");
            }
        }
        out
    }
}

fn describe(target: Target) -> String {
    match target {
        Target::RatioAtLeast(min) => format!(">= {min:.2}x"),
        Target::P50Below(max) => format!("p50 < {}", millis(max)),
        Target::CpuRatioAtMost(max) => format!("cpu <= {max:.2}x"),
    }
}

/// Met or missed, and by how much of the target.
fn verdict(met: Option<bool>, margin: Option<f64>) -> String {
    let by = margin.map_or(String::new(), |margin| {
        format!(" ({:+.0}%)", margin * 100.0)
    });
    match met {
        Some(true) => format!("yes{by}"),
        Some(false) => format!("**no**{by}"),
        None => "-".to_owned(),
    }
}

/// A duration in microseconds: CPU per job is tens of microseconds.
fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A duration in milliseconds with enough digits for microsecond-scale jobs.
pub(crate) fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_nearest_rank_of_the_sorted_samples() {
        let samples = Samples::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(samples.quantile(0.5), Some(Duration::from_millis(51)));
        assert_eq!(samples.quantile(0.99), Some(Duration::from_millis(99)));
        assert_eq!(samples.quantile(1.0), Some(Duration::from_millis(100)));
        assert_eq!(
            Samples::default().quantile(0.5),
            None,
            "no samples, no quantile"
        );
    }

    #[test]
    fn a_ratio_target_is_met_at_its_bound_and_missed_below_it() {
        let reference = Row::new("ref", Some(100.0), Samples::default());
        let at = Row::new("at", Some(90.0), Samples::default())
            .against(&reference, Some(Target::RatioAtLeast(0.9)));
        let below = Row::new("below", Some(89.0), Samples::default())
            .against(&reference, Some(Target::RatioAtLeast(0.9)));
        assert_eq!(at.met(), Some(true), "0.90x meets >= 0.90x");
        assert_eq!(below.met(), Some(false), "0.89x misses >= 0.90x");
    }

    #[test]
    fn a_cpu_target_compares_our_cpu_per_job_with_the_reference_lower_being_better() {
        let with_cpu = |name: &str, micros: u64| {
            Row::new(name, None, Samples::default()).cpu(Some(Duration::from_micros(micros)))
        };
        let reference = with_cpu("ref", 100);
        let target = Some(Target::CpuRatioAtMost(0.7));
        let at = with_cpu("at", 70).cpu_against(&reference, target);
        let above = with_cpu("above", 80).cpu_against(&reference, target);
        assert_eq!(at.scenario, "at, cpu/job", "a CPU row says it compares CPU");
        assert_eq!(at.met(), Some(true), "0.70x meets <= 0.70x");
        assert_eq!(above.met(), Some(false), "0.80x misses <= 0.70x");
        let missed_by = above.margin().expect("a ratio and a target");
        assert!(
            (missed_by + 0.125).abs() < 1e-9,
            "0.80x reaches 0.70/0.80 of a <= 0.70x target, so misses by 12.5%, not {missed_by}"
        );
    }
}
