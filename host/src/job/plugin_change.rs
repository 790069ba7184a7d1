//! What a load of one plugin file did: the one value the loader produces and its observers
//! read (the metrics count it, the dashboard's reload history keeps it, the log says it).

use serde::{Deserialize, Serialize};

/// What happened to one plugin file, tagged by `kind` on the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PluginChange {
    /// A plugin was loaded where none was.
    Loaded {
        /// Its name, as its manifest gives it.
        plugin: String,
        /// Its content hash.
        version: String,
    },
    /// A new version replaced the one loaded from the same file.
    Replaced {
        /// Its name.
        plugin: String,
        /// The version that served until now.
        old: String,
        /// The version that serves from now on.
        new: String,
    },
    /// A new version went on probation: it takes `share_percent` of the deliveries while
    /// the old one serves the rest, until a verdict (docs/replay.md, "Canary reloads").
    OnProbation {
        /// Its name.
        plugin: String,
        /// The version that keeps serving the rest.
        old: String,
        /// The version on probation.
        new: String,
        /// Its share of the deliveries, in percent.
        share_percent: u32,
    },
    /// The version on probation did as well as the old one over its window and now
    /// serves everything.
    Promoted {
        /// Its name.
        plugin: String,
        /// The version it replaced.
        old: String,
        /// The version promoted.
        new: String,
    },
    /// The version on probation failed more than the old one by more than the margin: the
    /// old one serves everything again.
    RolledBack {
        /// Its name.
        plugin: String,
        /// The version serving again.
        old: String,
        /// The version rolled back.
        new: String,
        /// The failure rates that decided it.
        cause: String,
    },
    /// The file was refused; what was loaded from it before keeps serving.
    Refused {
        /// Why, bounded.
        cause: String,
    },
    /// The file holds the version already loaded.
    Unchanged,
    /// The file is gone and its plugin unloaded.
    Removed,
    /// The file is gone and nothing was loaded from it.
    Nothing,
}

impl PluginChange {
    /// The `outcome` label of `jobhost_plugin_loads_total`, for a change that loaded or
    /// refused a binary; none for the others, which no load counts.
    pub fn load_outcome(&self) -> Option<&'static str> {
        match self {
            Self::Loaded { .. } => Some("loaded"),
            Self::Replaced { .. } => Some("replaced"),
            Self::Refused { .. } => Some("refused"),
            Self::OnProbation { .. } => Some("probation"),
            Self::Promoted { .. } => Some("promoted"),
            Self::RolledBack { .. } => Some("rolled_back"),
            Self::Unchanged | Self::Removed | Self::Nothing => None,
        }
    }

    /// Whether the dashboard's reload history keeps it: what changed what serves.
    pub fn is_news(&self) -> bool {
        !matches!(self, Self::Unchanged | Self::Nothing)
    }
}
