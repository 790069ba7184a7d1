//! The `host` interface a guest imports: `log`, `enqueue` and `report-panic`.
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

use std::time::Duration;

use serde_json::value::RawValue;
use uuid::Uuid;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, WasmList, WasmStr};

use super::bindings::types::Level;
use super::budget::{BudgetExceeded, PANIC_MESSAGE_MAX};
use super::load::WIT_VERSION;
use super::store::JobState;
use crate::job::FollowUp;
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
    if job_type.is_empty() {
        return Err("the job type is empty".to_owned());
    }
    if job_type.chars().any(char::is_control) {
        let shown = text::bounded(job_type, NAME_MAX);
        return Err(format!(
            "the job type `{shown}` contains control characters"
        ));
    }
    let payload: Box<RawValue> = serde_json::from_slice(payload)
        .map_err(|err| format!("the payload of `{job_type}` is not JSON: {err}"))?;
    Ok(FollowUp {
        job_id: Uuid::new_v4(),
        job_type: job_type.to_owned(),
        payload,
        delay: delay.map(Duration::from_millis),
    })
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
