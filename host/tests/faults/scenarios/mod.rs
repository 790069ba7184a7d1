//! The fault suite's scenarios, one module each; the ledger, the host process and the
//! summary table they share with other tests are in `support::faults`.

pub(crate) mod bad_input;
pub(crate) mod broken_plugins;
pub(crate) mod broker_faults;
pub(crate) mod hostile;
pub(crate) mod hostile_messages;
pub(crate) mod http_floods;
pub(crate) mod stops;

/// Jobs per scenario unless `JOBHOST_FAULT_JOBS` says otherwise: "a few thousand", so the
/// suite stays within a few minutes on a loaded 2-core machine.
const DEFAULT_JOBS: usize = 2000;

/// How many jobs the scenarios send (`JOBHOST_FAULT_JOBS`, default [`DEFAULT_JOBS`]).
pub(crate) fn job_count() -> usize {
    match std::env::var("JOBHOST_FAULT_JOBS") {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("JOBHOST_FAULT_JOBS `{value}` is not a job count")),
        Err(_) => DEFAULT_JOBS,
    }
}
