//! `[plugins.NAME] probation`: a new version of the plugin takes a share of the deliveries
//! beside the old one until a verdict, instead of replacing it at once (docs/replay.md,
//! "Canary reloads").

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::GrantsError;
use super::file::Lines;

/// How a new version is judged before it serves everything.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probation {
    /// The share of the deliveries the new version takes, above 0 and at most 1: every
    /// `round(1 / share)`-th delivery of the plugin's job types.
    pub share: f64,
    /// How long it is judged at least: promoted once this has passed and it ran `min_jobs`.
    pub window: Duration,
    /// By how much its failure rate may exceed the old version's before it is rolled back,
    /// 0 to 1 (0.05: five points).
    pub margin: f64,
    /// Attempts it runs at least before any verdict.
    pub min_jobs: u32,
}

impl Default for Probation {
    fn default() -> Self {
        Self {
            share: 0.1,
            window: Duration::from_secs(600),
            margin: 0.05,
            min_jobs: 20,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProbationEntry {
    share: Option<Spanned<f64>>,
    window: Option<Spanned<String>>,
    margin: Option<Spanned<f64>>,
    min_jobs: Option<Spanned<u32>>,
}

/// The section's probation, each field checked, the rest defaulted.
pub(super) fn parse(lines: &Lines<'_>, entry: ProbationEntry) -> Result<Probation, GrantsError> {
    let defaults = Probation::default();
    let share = match entry.share {
        None => defaults.share,
        Some(share) if *share.get_ref() > 0.0 && *share.get_ref() <= 1.0 => *share.get_ref(),
        Some(share) => {
            let value = share.get_ref();
            return Err(lines.error(
                share.span(),
                format!("probation share is {value}; it is above 0 and at most 1"),
            ));
        }
    };
    let margin = match entry.margin {
        None => defaults.margin,
        Some(margin) if (0.0..=1.0).contains(margin.get_ref()) => *margin.get_ref(),
        Some(margin) => {
            let value = margin.get_ref();
            return Err(lines.error(
                margin.span(),
                format!("probation margin is {value}; it is 0 to 1"),
            ));
        }
    };
    let window = match entry.window {
        None => defaults.window,
        Some(window) => jobhost_sdk::parse_duration(window.get_ref()).map_err(|err| {
            lines.error(
                window.span(),
                format!("probation window `{}`: {err}", window.get_ref()),
            )
        })?,
    };
    let min_jobs = match entry.min_jobs {
        None => defaults.min_jobs,
        Some(n) if *n.get_ref() >= 1 => *n.get_ref(),
        Some(n) => return Err(lines.error(n.span(), "probation min_jobs is 0; it is at least 1")),
    };
    Ok(Probation {
        share,
        window,
        margin,
        min_jobs,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::grants::{Grants, Identity};

    fn probation_of(toml: &str) -> Result<Option<Probation>, String> {
        let grants = Grants::parse(Path::new("jobhost.toml"), toml).map_err(|e| e.to_string())?;
        let identity = Identity::of_file(Path::new("billing.wasm"), "00");
        Ok(grants.granted(&identity).and_then(|g| g.probation))
    }

    #[test]
    fn a_probation_takes_its_fields_and_defaults_the_rest() {
        let probation =
            probation_of("[plugins.billing]\nprobation = { share = 0.25, window = \"5m\" }\n")
                .expect("valid")
                .expect("a probation");
        assert_eq!(
            probation,
            Probation {
                share: 0.25,
                window: Duration::from_secs(300),
                ..Probation::default()
            }
        );
        assert_eq!(probation_of("[plugins.billing]\n").expect("valid"), None);
    }

    #[test]
    fn a_share_margin_or_window_out_of_range_refuses_the_file_with_its_line() {
        for (entry, says) in [
            ("share = 0.0", "above 0 and at most 1"),
            ("share = 1.5", "above 0 and at most 1"),
            ("margin = -0.1", "0 to 1"),
            ("window = \"soon\"", "probation window `soon`"),
            ("min_jobs = 0", "at least 1"),
        ] {
            let refused = probation_of(&format!("[plugins.billing]\nprobation = {{ {entry} }}\n"))
                .expect_err(entry);
            assert!(
                refused.contains("line 2") && refused.contains(says),
                "{entry}: {refused}"
            );
        }
    }
}
