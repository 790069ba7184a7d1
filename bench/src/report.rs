//! What a scenario measured, and the table the runner prints.
//!
//! Every ratio is "ours over the reference" in the direction where higher is better for
//! jobhost: a throughput ratio is jobs/s over the reference's jobs/s, a drain ratio is
//! the reference's drain time over ours.

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
}

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) jobs_per_s: Option<f64>,
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

    /// This row compared with a reference by an explicit ratio.
    pub(crate) fn with_ratio(mut self, reference: &str, ratio: f64, target: Target) -> Self {
        self.reference = Some(reference.to_owned());
        self.ratio = Some(ratio);
        self.target = Some(target);
        self
    }

    /// Show `tail` (e.g. 0.95) instead of p99.
    pub(crate) fn tail(mut self, tail: f64) -> Self {
        self.tail = tail;
        self
    }

    pub(crate) fn met(&self) -> Option<bool> {
        match self.target? {
            Target::RatioAtLeast(min) => self.ratio.map(|ratio| ratio >= min),
            Target::P50Below(max) => self.samples.quantile(0.5).map(|p50| p50 < max),
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
        out.push_str("| scenario | jobs/s | p50 | p99 | reference | ratio | target | met? |\n");
        out.push_str("|---|---:|---:|---:|---|---:|---|---|\n");
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
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                row.scenario,
                row.jobs_per_s.map_or("-".into(), |r| format!("{r:.0}")),
                row.samples.quantile(0.5).map_or("-".into(), millis),
                tail.unwrap_or_else(|| "-".into()),
                row.reference.as_deref().unwrap_or("-"),
                row.ratio.map_or("-".into(), |r| format!("{r:.2}x")),
                row.target.map_or("-".into(), describe),
                match row.met() {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "-",
                },
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
    }
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
}
