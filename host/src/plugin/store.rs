//! One job's store: its data, its memory cap and its deadline.
//!
//! A store is created per call into a guest (each job, and the manifest call at load) and
//! dropped with the instance, which returns the instance's pool slot and emits the job's
//! last log lines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;
use wasmtime::component::{ResourceTable, ResourceTableError};
use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::budget::{BudgetExceeded, HostCallBudget, Spent};
use super::engine::MIB;
use super::guest_log::{GuestStdio, LogSink, LogTags, Stdio};
use super::outbound::JobGrants;
use super::tape::Tape;
use crate::grants::{Grants, Identity};
use crate::job::FollowUp;
use crate::text::{self, REASON_MAX};

/// The data of a job's store: the sandbox's WASI state, the job's limits, and what the
/// guest reported through the host imports.
pub(super) struct JobState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    limits: JobLimits,
    /// What the operator grants the job's plugin: outbound HTTP, config values, secrets.
    pub(super) grants: JobGrants,
    deadline: Instant,
    pub(super) log: Arc<LogSink>,
    /// What the guest has spent of its host-call budget.
    pub(super) spent: Spent,
    /// The follow-up jobs the guest enqueued, in order.
    pub(super) follow_ups: Vec<FollowUp>,
    /// The job, and the batch it is a member of: what `enqueue-batch` and `add-to-batch`
    /// derive their ids from and add to.
    pub(super) job_id: Uuid,
    pub(super) batch: Option<Uuid>,
    /// How many groups of batch members the guest enqueued so far (`enqueue-batch` and
    /// `add-to-batch` calls), numbering their ids.
    pub(super) batch_groups: u32,
    /// The message of the guest's panic, reported just before it aborts.
    pub(super) panic: Option<String>,
    /// What records the job's import answers, or plays a recording's back.
    pub(super) tape: Option<Tape>,
}

impl std::fmt::Debug for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobState")
            .field("deadline", &self.deadline)
            .field("spent", &self.spent)
            .field("follow_ups", &self.follow_ups)
            .field("panic", &self.panic)
            .finish_non_exhaustive()
    }
}

impl JobState {
    /// Why a call into the guest failed with `err`, for the job's outcome: the host-call
    /// budget (a full resource table included), the timeout, the memory cap, the guest's panic message, or the trap's own
    /// message; at most [`REASON_MAX`] bytes, on one line.
    pub(super) fn crash_reason(&self, err: &wasmtime::Error, timeout: Duration) -> String {
        let reason = self.cause(err, timeout);
        text::bounded(&reason, REASON_MAX).into_owned()
    }

    fn cause(&self, err: &wasmtime::Error, timeout: Duration) -> String {
        let detail = format!("{err:?}");
        tracing::debug!(error = %text::bounded(&detail, REASON_MAX), "guest call failed");
        if let Some(exceeded) = self.spent.exceeded.clone().or_else(|| self.log.exceeded()) {
            return exceeded.to_string();
        }
        if matches!(
            err.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        ) {
            let limit = self.table.max_capacity();
            return BudgetExceeded::Resources { limit }.to_string();
        }
        let trap = err.downcast_ref::<Trap>();
        if trap == Some(&Trap::Interrupt) {
            return timed_out(timeout);
        }
        if self.limits.memory_cap_hit {
            return format!(
                "memory limit of {} MiB exceeded",
                self.limits.memory_cap / MIB
            );
        }
        if let Some(message) = &self.panic {
            return message.clone();
        }
        match trap {
            Some(trap) => trap.to_string(),
            None => err.root_cause().to_string(),
        }
    }
}

/// The crash reason of a job stopped at its deadline.
pub(super) fn timed_out(timeout: Duration) -> String {
    format!("job timed out after {timeout:?}")
}

impl WasiHttpView for JobState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.grants,
        }
    }
}

impl WasiView for JobState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What one call into a guest may use: bytes per memory, wall time, host calls, and what
/// the operator grants its plugin.
pub(super) struct StoreSetup {
    pub(super) memory_cap: usize,
    pub(super) timeout: Duration,
    pub(super) budget: HostCallBudget,
    /// Who the plugin is to its grants: its file, not its manifest.
    pub(super) plugin: Identity,
    pub(super) job_id: Uuid,
    /// The batch the job is a member of.
    pub(super) batch: Option<Uuid>,
    /// The grants in force when the call starts.
    pub(super) grants: Arc<Grants>,
    /// Whether to record the call, or the recording it plays back.
    pub(super) tape: Option<Tape>,
}

/// A fresh store for one call, set up as `setup` says.
///
/// The sandbox grants nothing else: no preopened directories, no environment, no
/// arguments, no sockets, stdin closed; stdout and stderr go to the job's log. Clocks and
/// randomness are the only WASI capabilities left, as every `wasm32-wasip2` program needs
/// them; outbound HTTP goes through `wasi:http` and the grants, never through sockets.
pub(super) fn new_store(
    engine: &wasmtime::Engine,
    tags: LogTags,
    setup: StoreSetup,
) -> Store<JobState> {
    let StoreSetup {
        memory_cap,
        timeout,
        budget,
        plugin,
        job_id,
        batch,
        grants,
        tape,
    } = setup;
    let deadline = Instant::now() + timeout;
    let log = LogSink::new(tags, budget.log_bytes, tape.clone());
    let mut wasi = WasiCtx::builder();
    wasi.stdout(GuestStdio::new(Arc::clone(&log), Stdio::Stdout))
        .stderr(GuestStdio::new(Arc::clone(&log), Stdio::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if let Some(tape) = &tape {
        tape.wire(&mut wasi);
    }
    let wasi = wasi.build();
    // Every resource a guest holds (wasi:http's, WASI's streams and pollables) lives in
    // this table, in host memory: its size is part of the budget.
    let mut table = ResourceTable::new();
    table.set_max_capacity(budget.resources);
    let limits = StoreLimitsBuilder::new()
        .memory_size(memory_cap)
        .trap_on_grow_failure(true)
        .build();
    let state = JobState {
        wasi,
        http: WasiHttpCtx::new(),
        table,
        grants: JobGrants::new(plugin, job_id, grants, deadline, tape.clone()),
        limits: JobLimits {
            limits,
            memory_cap,
            memory_cap_hit: false,
        },
        deadline,
        log,
        spent: Spent::new(budget),
        follow_ups: Vec::new(),
        job_id,
        batch,
        batch_groups: 0,
        panic: None,
        tape,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    // Because the engine's ticker advances the epoch every tick, a running guest comes back
    // here once per tick: it yields to the async runtime so a spinning guest cannot starve
    // other tasks, and traps with `Trap::Interrupt` once its deadline has passed.
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|store| {
        if Instant::now() >= store.data().deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    store
}

/// [`StoreLimits`], remembering whether the memory cap stopped the guest: a grow refused
/// by the cap traps with a generic message, and the outcome must say what happened.
#[derive(Debug)]
struct JobLimits {
    limits: StoreLimits,
    memory_cap: usize,
    memory_cap_hit: bool,
}

impl ResourceLimiter for JobLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum);
        if !matches!(allowed, Ok(true)) {
            self.memory_cap_hit = true;
        }
        allowed
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
