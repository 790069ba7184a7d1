//! The suite's summary: one row per scenario, printed as a Markdown table.

use std::collections::BTreeMap;
use std::fmt;

/// What one scenario sent and what became of it, counted by job id.
#[derive(Debug, Default)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) sent: usize,
    /// Distinct jobs that completed.
    pub(crate) completed: usize,
    /// Completion records beyond the first of their job.
    pub(crate) duplicated: usize,
    /// Dead letters by reason.
    pub(crate) dead: BTreeMap<String, usize>,
}

impl Row {
    pub(crate) fn new(scenario: impl Into<String>) -> Self {
        Self {
            scenario: scenario.into(),
            ..Self::default()
        }
    }

    pub(crate) fn dead_lettered(&self) -> usize {
        self.dead.values().sum()
    }

    /// Sent jobs that neither completed nor were dead-lettered.
    pub(crate) fn lost(&self) -> usize {
        self.sent
            .saturating_sub(self.completed + self.dead_lettered())
    }
}

/// The rows of every scenario run so far.
#[derive(Debug, Default)]
pub(crate) struct Table(pub(crate) Vec<Row>);

/// Long reasons keep their head and tail, where the policy's verdict and the cause are,
/// so the table stays readable; the tests assert the full text.
const REASON_HEAD: usize = 30;
const REASON_TAIL: usize = 60;

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| scenario | sent | completed | lost | duplicated | dead-lettered (by reason) |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---|")?;
        for row in &self.0 {
            let reasons: Vec<String> = row
                .dead
                .iter()
                .map(|(reason, n)| format!("{n} × {}", cut(reason)))
                .collect();
            let reasons = if reasons.is_empty() {
                "0".to_owned()
            } else {
                format!("{}: {}", row.dead_lettered(), reasons.join("; "))
            };
            writeln!(
                f,
                "| {} | {} | {} | {} | {} | {reasons} |",
                row.scenario,
                row.sent,
                row.completed,
                row.lost(),
                row.duplicated
            )?;
        }
        Ok(())
    }
}

fn cut(reason: &str) -> String {
    let chars: Vec<char> = reason.replace('|', "/").chars().collect();
    if chars.len() <= REASON_HEAD + REASON_TAIL {
        return chars.into_iter().collect();
    }
    let head: String = chars[..REASON_HEAD].iter().collect();
    let tail: String = chars[chars.len() - REASON_TAIL..].iter().collect();
    format!("{head}…{tail}")
}
