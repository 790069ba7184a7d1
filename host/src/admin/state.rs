//! What the admin API serves from, shared by its routes and the dashboard's.

use crate::activity::Activity;
use crate::grants::SharedGrants;
use crate::metrics::Metrics;
use crate::policy::Granularity;
use crate::telemetry::Telemetry;
use crate::worker::{Fleet, Plugins};

use super::access::AdminAccess;

/// What the admin API serves from.
#[derive(Debug, Clone)]
pub struct AdminState<B> {
    /// The broker the host works on.
    pub backend: B,
    /// The live registry.
    pub plugins: Plugins,
    /// The delay step enqueues are rounded to, the host's retry granularity.
    pub granularity: Granularity,
    /// Who may call the API.
    pub access: AdminAccess,
    /// What `GET /metrics` serves: the metrics attached to the host's telemetry.
    pub metrics: Metrics,
    /// What the dashboard shows of the host's recent activity, attached to its telemetry
    /// too.
    pub activity: Activity,
    /// Where the API emits what it does (an enqueue refused as a duplicate).
    pub telemetry: Telemetry,
    /// The grants in force, shown with each plugin.
    pub grants: SharedGrants,
    /// What the fleet's operators paused, as the worker knows it.
    pub fleet: Fleet,
    /// The fleet's batches, as this host folded its batch log.
    pub batches: crate::batches::Board,
}
