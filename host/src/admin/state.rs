//! What the admin API serves from, shared by its routes and the dashboard's.

use crate::grants::SharedGrants;
use crate::metrics::Metrics;
use crate::policy::Granularity;
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
    /// What `GET /metrics` serves: the metrics the worker and the loader count into.
    pub metrics: Metrics,
    /// The grants in force, shown with each plugin.
    pub grants: SharedGrants,
    /// What the fleet's operators paused, as the worker knows it.
    pub fleet: Fleet,
}
