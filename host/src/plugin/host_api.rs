//! The `host` interface a guest imports: `log`, `enqueue` and `report-panic`.

use std::time::Duration;

use serde_json::value::RawValue;
use uuid::Uuid;

use super::bindings::{host, types};
use super::store::JobState;
use crate::job::FollowUp;

/// Total bytes of follow-up payloads one job may enqueue: follow-ups are held in host
/// memory until the job returns, outside the guest's memory cap.
pub(super) const FOLLOW_UP_BUDGET: usize = 16 * 1024 * 1024;

/// Bytes of a panic message kept; the rest of a runaway message is cut.
const PANIC_MESSAGE_LIMIT: usize = 4 * 1024;

impl types::Host for JobState {}

impl host::Host for JobState {
    fn log(&mut self, level: types::Level, message: String, fields: Vec<(String, String)>) {
        self.log.log(level, &message, &fields);
    }

    /// Collect a follow-up; the worker publishes it only if the job completes.
    fn enqueue(
        &mut self,
        job_type: String,
        payload: Vec<u8>,
        delay: Option<u64>,
    ) -> Result<String, String> {
        if job_type.is_empty() {
            return Err("the job type is empty".to_owned());
        }
        let bytes = self.follow_ups.bytes + payload.len();
        if bytes > FOLLOW_UP_BUDGET {
            return Err(format!(
                "follow-ups of one job may carry at most {FOLLOW_UP_BUDGET} bytes of payload"
            ));
        }
        let payload: Box<RawValue> = serde_json::from_slice(&payload)
            .map_err(|err| format!("the payload of `{job_type}` is not JSON: {err}"))?;
        let job_id = Uuid::new_v4();
        self.follow_ups.bytes = bytes;
        self.follow_ups.jobs.push(FollowUp {
            job_id,
            job_type,
            payload,
            delay: delay.map(Duration::from_millis),
        });
        Ok(job_id.to_string())
    }

    fn report_panic(&mut self, mut message: String) {
        if message.len() > PANIC_MESSAGE_LIMIT {
            let cut = (0..=PANIC_MESSAGE_LIMIT)
                .rev()
                .find(|&i| message.is_char_boundary(i))
                .unwrap_or(0);
            message.truncate(cut);
        }
        self.panic = Some(message);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wasmtime::Store;

    use super::*;
    use crate::plugin::guest_log::LogTags;
    use crate::plugin::store::new_store;

    fn store() -> Store<JobState> {
        let tags = LogTags {
            plugin: "test".into(),
            job_type: "test.Job".to_owned(),
            job_id: Uuid::nil(),
            attempt: 1,
        };
        new_store(
            &wasmtime::Engine::default(),
            tags,
            1 << 20,
            Duration::from_secs(1),
        )
    }

    #[test]
    fn an_enqueued_follow_up_gets_a_fresh_v4_id_and_keeps_its_payload_and_delay() {
        let mut store = store();
        let state = store.data_mut();
        let id = host::Host::enqueue(
            state,
            "next.Job".to_owned(),
            br#"{"n": 1}"#.to_vec(),
            Some(1500),
        )
        .expect("a JSON payload is accepted");
        let follow_up = &state.follow_ups.jobs[0];
        assert_eq!(
            follow_up.job_id.to_string(),
            id,
            "the guest gets the follow-up's id"
        );
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
    fn a_follow_up_that_is_not_json_is_refused_and_not_collected() {
        let mut store = store();
        let state = store.data_mut();
        let err = host::Host::enqueue(state, "next.Job".to_owned(), b"{nope".to_vec(), None)
            .expect_err("a payload that is not JSON is refused");
        assert!(
            err.starts_with("the payload of `next.Job` is not JSON"),
            "{err}"
        );
        assert!(
            state.follow_ups.jobs.is_empty(),
            "a refused follow-up is not published"
        );
    }

    #[test]
    fn follow_ups_of_one_job_are_bounded_in_total_size() {
        let mut store = store();
        let state = store.data_mut();
        let half = format!("\"{}\"", "x".repeat(FOLLOW_UP_BUDGET / 2 - 2)); // two halves fill it
        for _ in 0..2 {
            host::Host::enqueue(state, "big.Job".to_owned(), half.clone().into_bytes(), None)
                .expect("within the budget");
        }
        let err = host::Host::enqueue(state, "big.Job".to_owned(), half.into_bytes(), None)
            .expect_err("beyond the budget");
        assert!(err.contains("at most"), "{err}");
        assert_eq!(state.follow_ups.jobs.len(), 2);
    }

    #[test]
    fn a_runaway_panic_message_is_cut_on_a_character_boundary() {
        let mut store = store();
        let state = store.data_mut();
        host::Host::report_panic(state, "é".repeat(PANIC_MESSAGE_LIMIT));
        let message = state.panic.as_deref().expect("the panic is recorded");
        assert!(
            message.len() <= PANIC_MESSAGE_LIMIT && message.starts_with("éé"),
            "{}",
            message.len()
        );
    }
}
