//! The `host` interface a guest imports: `log`, `enqueue`, `enqueue-batch`,
//! `add-to-batch` and `report-panic`.
//!
//! Linked by hand rather than through bindgen's generated trait, because bindgen lifts every
//! `string` and `list` argument into a host `String` or `Vec` before the host sees it: a
//! guest could hand over its whole memory in each call. These functions take wasmtime's
//! [`WasmStr`] and [`WasmList`] instead, views into guest memory, and charge what they hold
//! against the job's [`HostCallBudget`](super::HostCallBudget) before copying anything.
//! Exceeding the budget traps the guest (see [`budget`](super::budget)).
//!
//! A UTF-8 string, what every Rust guest passes, is read in place. A component declaring
//! UTF-16 strings is transcoded by wasmtime into a host string before its length is known;
//! that copy is bounded by the guest's memory cap, as the string lies in guest memory.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use uuid::Uuid;
use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Lift, Linker, WasmList, WasmStr};

use super::bindings::types::Level;
use super::budget::{BudgetExceeded, PANIC_MESSAGE_MAX};
use super::load::WIT_VERSION;
use super::store::JobState;
use crate::broker::CONTEXT_MAX_BYTES;
use crate::job::batch::{member_job_id, opened_batch_id};
use crate::job::{Callbacks, FollowUp, JOB_TYPE_MAX, Joins};
use crate::text::{self, NAME_MAX};

type Store<'a> = StoreContextMut<'a, JobState>;

/// Bytes of an overlong panic message shown in the crash reason.
const PANIC_START_SHOWN: usize = 1024;

/// Define the `host` interface's functions in `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<JobState>) -> wasmtime::Result<()> {
    let mut host = linker.instance(&format!("jobhost:plugin/host@{WIT_VERSION}"))?;
    host.func_wrap("log", |store, (level, message, fields)| {
        log(store, level, &message, &fields)
    })?;
    host.func_wrap("enqueue", |store, (job_type, payload, delay)| {
        enqueue(store, &job_type, &payload, delay).map(|result| (result,))
    })?;
    host.func_wrap("report-panic", |store, (message,)| {
        report_panic(store, &message)
    })?;
    host.func_wrap(
        "enqueue-batch",
        |store, (jobs, callbacks, context): (GuestJobs, GuestCallbacks, Option<WasmList<u8>>)| {
            enqueue_batch(store, &jobs, &callbacks, context.as_ref()).map(|result| (result,))
        },
    )?;
    host.func_wrap("add-to-batch", |store, (jobs,): (GuestJobs,)| {
        add_to_batch(store, &jobs).map(|result| (result,))
    })?;
    Ok(())
}

/// Charge one host call; every import starts here (`wasi:config/store`'s too).
pub(super) fn call(store: &mut Store<'_>) -> wasmtime::Result<()> {
    let state = store.data_mut();
    state
        .spent
        .call()
        .map_err(|exceeded| state.spent.overrun(exceeded))
}

fn overrun(store: &mut Store<'_>, exceeded: BudgetExceeded) -> wasmtime::Error {
    store.data_mut().spent.overrun(exceeded)
}

/// Log through the job's sink: the field count is checked before the fields are read,
/// their bytes and the message's before the sink copies any.
fn log(
    mut store: Store<'_>,
    level: Level,
    message: &WasmStr,
    fields: &WasmList<(WasmStr, WasmStr)>,
) -> wasmtime::Result<()> {
    call(&mut store)?;
    if let Err(exceeded) = store.data().spent.log_fields(fields.len()) {
        return Err(overrun(&mut store, exceeded));
    }
    // Views only: lifting a pair of `WasmStr` reads two pointers and two lengths.
    let fields = fields
        .iter(&mut store)?
        .collect::<wasmtime::Result<Vec<_>>>()?;
    let message = message.to_str(&store)?;
    let fields = fields
        .iter()
        .map(|(key, value)| Ok((key.to_str(&store)?, value.to_str(&store)?)))
        .collect::<wasmtime::Result<Vec<_>>>()?;
    let sink = &store.data().log;
    sink.log(level, &message, &fields)
        .map_err(wasmtime::Error::new)
}

/// Collect a follow-up; the worker publishes it only if the job completes. The job type's
/// length and the payload's size are charged before either is copied; a refusal the guest
/// can act on (an empty or unprintable job type, a payload that is not JSON) is returned
/// to it, and still counts as a follow-up, so refusals cannot be looped for free.
fn enqueue(
    mut store: Store<'_>,
    job_type: &WasmStr,
    payload: &WasmList<u8>,
    delay: Option<u64>,
) -> wasmtime::Result<Result<String, String>> {
    call(&mut store)?;
    let job_type_len = job_type.to_str(&store)?.len();
    let state = store.data_mut();
    if let Err(exceeded) = state.spent.follow_up(job_type_len, payload.len()) {
        return Err(state.spent.overrun(exceeded));
    }
    let (job_type, follow_up) = {
        let job_type = job_type.to_str(&store)?;
        let follow_up = follow_up(&job_type, payload.as_le_slice(&store), delay);
        (job_type.into_owned(), follow_up)
    };
    let answer = follow_up
        .as_ref()
        .map(|follow_up| follow_up.job_id.to_string());
    // A replay answers the recorded id, so the guest sees the same follow-up.
    let answer = match &store.data().tape {
        Some(tape) => tape.enqueue(&job_type, answer.map_err(Clone::clone))?,
        None => answer.map_err(Clone::clone),
    };
    if let (Ok(mut follow_up), Ok(id)) = (follow_up, &answer) {
        follow_up.job_id = id.parse().unwrap_or(follow_up.job_id);
        store.data_mut().follow_ups.push(follow_up);
    }
    Ok(answer)
}

/// A follow-up of `job_type` with `payload`, or why the guest's request is refused.
fn follow_up(job_type: &str, payload: &[u8], delay: Option<u64>) -> Result<FollowUp, String> {
    checked_job_type(job_type)?;
    let payload: Box<RawValue> = serde_json::from_slice(payload)
        .map_err(|err| format!("the payload of `{job_type}` is not JSON: {err}"))?;
    Ok(FollowUp {
        job_id: Uuid::new_v4(),
        job_type: job_type.to_owned(),
        payload,
        delay: delay.map(Duration::from_millis),
        batch: None,
    })
}

/// Why `job_type` cannot name a job, if it cannot.
fn checked_job_type(job_type: &str) -> Result<(), String> {
    if job_type.is_empty() {
        return Err("the job type is empty".to_owned());
    }
    if job_type.chars().any(char::is_control) {
        let shown = text::bounded(job_type, NAME_MAX);
        return Err(format!(
            "the job type `{shown}` contains control characters"
        ));
    }
    Ok(())
}

/// A batch's callbacks as the guest passes them: views into its memory, read only once
/// their lengths are checked.
#[derive(ComponentType, Lift)]
#[component(record)]
struct GuestCallbacks {
    #[component(name = "on-success")]
    on_success: Option<WasmStr>,
    #[component(name = "on-complete")]
    on_complete: Option<WasmStr>,
    #[component(name = "on-death")]
    on_death: Option<WasmStr>,
}

/// Jobs as a batch call passes them: a job type and a JSON payload each.
type GuestJobs = WasmList<(WasmStr, WasmList<u8>)>;

/// Collect the members of a new batch; the worker opens it and publishes them only if the
/// job completes. Each member is charged as a follow-up before it is copied; a refusal
/// the guest can act on is returned to it.
fn enqueue_batch(
    mut store: Store<'_>,
    jobs: &GuestJobs,
    callbacks: &GuestCallbacks,
    context: Option<&WasmList<u8>>,
) -> wasmtime::Result<Result<String, String>> {
    call(&mut store)?;
    let callbacks = match guest_callbacks(&store, callbacks)? {
        Ok(callbacks) => callbacks,
        Err(refused) => return Ok(Err(refused)),
    };
    let context = match context {
        None => None,
        Some(context) if context.len() > CONTEXT_MAX_BYTES => {
            return Ok(Err(format!(
                "the batch's context is {} bytes, the limit is {CONTEXT_MAX_BYTES}",
                context.len()
            )));
        }
        Some(context) => match serde_json::from_slice(context.as_le_slice(&store)) {
            Ok(context) => Some(context),
            Err(err) => return Ok(Err(format!("the batch's context is not JSON: {err}"))),
        },
    };
    let state = store.data();
    let batch = opened_batch_id(state.job_id, state.batch_groups);
    let joins = Arc::new(Joins::Opened {
        batch,
        callbacks,
        context,
    });
    Ok(join(store, jobs, joins)?.map(|_| batch.to_string()))
}

/// Collect jobs that join the batch the job is a member of, published (after an add
/// record) only if the job completes.
fn add_to_batch(
    mut store: Store<'_>,
    jobs: &GuestJobs,
) -> wasmtime::Result<Result<Vec<String>, String>> {
    call(&mut store)?;
    let Some(batch) = store.data().batch else {
        return Ok(Err("this job is in no batch".to_owned()));
    };
    let joins = Arc::new(Joins::Parent { batch });
    Ok(join(store, jobs, joins)?.map(|ids| ids.iter().map(Uuid::to_string).collect()))
}

/// The callbacks' job types, each checked as a follow-up's is.
fn guest_callbacks(
    store: &Store<'_>,
    callbacks: &GuestCallbacks,
) -> wasmtime::Result<Result<Callbacks, String>> {
    let read = |job_type: &Option<WasmStr>| -> wasmtime::Result<Result<Option<String>, String>> {
        let Some(job_type) = job_type else {
            return Ok(Ok(None));
        };
        let job_type = job_type.to_str(store)?;
        if job_type.len() > JOB_TYPE_MAX {
            return Ok(Err(format!(
                "a callback's job type is {} bytes, the limit is {JOB_TYPE_MAX}",
                job_type.len()
            )));
        }
        Ok(checked_job_type(&job_type).map(|()| Some(job_type.into_owned())))
    };
    let on_success = match read(&callbacks.on_success)? {
        Ok(job_type) => job_type,
        Err(refused) => return Ok(Err(refused)),
    };
    let on_complete = match read(&callbacks.on_complete)? {
        Ok(job_type) => job_type,
        Err(refused) => return Ok(Err(refused)),
    };
    let on_death = match read(&callbacks.on_death)? {
        Ok(job_type) => job_type,
        Err(refused) => return Ok(Err(refused)),
    };
    Ok(Ok(Callbacks {
        on_success,
        on_complete,
        on_death,
    }))
}

/// Collect `jobs` as follow-ups joining `joins`, their ids derived from the job's and the
/// group's number, so a job run twice enqueues the same members. Every member is charged
/// before any is copied; one refused refuses the group, which still counts against the
/// budget.
fn join(
    mut store: Store<'_>,
    jobs: &GuestJobs,
    joins: Arc<Joins>,
) -> wasmtime::Result<Result<Vec<Uuid>, String>> {
    if jobs.len() == 0 {
        return Ok(Err("a batch has at least one job".to_owned()));
    }
    if let Err(exceeded) = store.data().spent.follow_ups_fit(jobs.len()) {
        return Err(overrun(&mut store, exceeded));
    }
    // Views only: a pair is two pointers and two lengths, and the count fits the budget.
    let views = jobs
        .iter(&mut store)?
        .collect::<wasmtime::Result<Vec<_>>>()?;
    for (job_type, payload) in &views {
        let job_type_len = job_type.to_str(&store)?.len();
        let state = store.data_mut();
        if let Err(exceeded) = state.spent.follow_up(job_type_len, payload.len()) {
            return Err(state.spent.overrun(exceeded));
        }
    }
    let state = store.data();
    let (job_id, group) = (state.job_id, state.batch_groups);
    let mut members = Vec::with_capacity(views.len());
    for (i, (job_type, payload)) in views.iter().enumerate() {
        let job_type = job_type.to_str(&store)?;
        let member =
            follow_up(&job_type, payload.as_le_slice(&store), None).map(|member| FollowUp {
                job_id: member_job_id(job_id, group, i),
                batch: Some(Arc::clone(&joins)),
                ..member
            });
        match member {
            Ok(member) => members.push(member),
            Err(refused) => return Ok(Err(refused)),
        }
    }
    let state = store.data_mut();
    state.batch_groups += 1;
    let ids = members.iter().map(|member| member.job_id).collect();
    state.follow_ups.extend(members);
    Ok(Ok(ids))
}

/// Record the message of the panic the guest is about to abort with.
fn report_panic(mut store: Store<'_>, message: &WasmStr) -> wasmtime::Result<()> {
    call(&mut store)?;
    let recorded = panic_message(&message.to_str(&store)?);
    match recorded {
        Ok(message) => {
            store.data_mut().panic = Some(message);
            Ok(())
        }
        Err(exceeded) => Err(overrun(&mut store, exceeded)),
    }
}

/// A panic message as the crash reason keeps it, escaped into one line; a message longer
/// than [`PANIC_MESSAGE_MAX`] is an overrun, reported with its start.
fn panic_message(message: &str) -> Result<String, BudgetExceeded> {
    if message.len() > PANIC_MESSAGE_MAX {
        return Err(BudgetExceeded::PanicMessage {
            len: message.len(),
            start: text::bounded(message, PANIC_START_SHOWN).into_owned(),
        });
    }
    Ok(text::bounded(message, PANIC_MESSAGE_MAX).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_up_gets_a_fresh_v4_id_and_keeps_its_payload_and_delay() {
        let follow_up =
            follow_up("next.Job", br#"{"n": 1}"#, Some(1500)).expect("a JSON payload is accepted");
        assert_eq!(follow_up.job_id.get_version_num(), 4);
        assert_eq!(follow_up.job_type, "next.Job");
        assert_eq!(
            follow_up.payload.get(),
            r#"{"n": 1}"#,
            "the payload is kept as sent"
        );
        assert_eq!(follow_up.delay, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn a_follow_up_that_is_not_json_is_refused_with_a_reason_for_the_guest() {
        let err = follow_up("next.Job", b"{nope", None).expect_err("not JSON");
        assert!(
            err.starts_with("the payload of `next.Job` is not JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_follow_up_job_type_must_be_a_printable_name() {
        assert_eq!(
            follow_up("", b"{}", None).expect_err("empty"),
            "the job type is empty"
        );
        assert_eq!(
            follow_up("next\nJob", b"{}", None).expect_err("a newline"),
            "the job type `next\\nJob` contains control characters",
            "the refusal shows the job type escaped"
        );
    }

    #[test]
    fn a_panic_message_is_kept_on_one_line() {
        let kept = panic_message("panicked at src/lib.rs:1:1:\nboom").expect("short");
        assert_eq!(kept, "panicked at src/lib.rs:1:1:\\nboom");
    }

    #[test]
    fn a_runaway_panic_message_is_an_overrun_that_shows_only_its_start() {
        let err = panic_message(&"é".repeat(PANIC_MESSAGE_MAX)).expect_err("8 KiB");
        let reason = err.to_string();
        assert!(
            reason.starts_with(
                "host-call budget exceeded: a panic message of 8192 bytes, more than 4096; it starts: éé"
            ),
            "{reason}"
        );
        assert!(reason.len() < 2 * PANIC_START_SHOWN, "{}", reason.len());
    }
}
