//! The `host` interface a guest imports: `log`, `enqueue` and `report-panic`.

use std::time::Duration;

use serde_json::value::RawValue;
use uuid::Uuid;

use super::bindings::{host, types};
use super::invoke::FollowUp;
use super::store::JobState;

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
