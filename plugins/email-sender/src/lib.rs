//! Example plugin: `email.SendEmail` on queue `examples.emails` (4 attempts, exponential
//! waits from 1s to 8s, so the demo stays lively).
//!
//! The SMTP server is pretend, and its behaviour follows the address:
//! - an address without `@` is a fatal error (`invalid address `...``): dead-lettered at
//!   once, since no retry can fix it;
//! - an address containing `flaky` meets a busy server (retryable) on attempts 1 and 2,
//!   and is sent on attempt 3;
//! - any other address is sent on the first attempt.

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "examples")]
enum EmailQueues {
    #[queue(retry(max_attempts = 4, backoff = "exponential", base = "1s", max = "8s"))]
    Emails,
}

/// An email to send.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "email.SendEmail", queue = EmailQueues::Emails)]
struct SendEmail {
    to: String,
    subject: String,
    body: String,
}

/// The attempt on which a flaky address finally gets through.
const FLAKY_SUCCEEDS_ON: u32 = 3;

fn send_email(email: SendEmail, ctx: &JobContext) -> Result<(), JobError> {
    if !email.to.contains('@') {
        return Err(JobError::fatal(format!("invalid address `{}`", email.to)));
    }
    if email.to.contains("flaky") && ctx.attempt() < FLAKY_SUCCEEDS_ON {
        ctx.warn(&format!(
            "smtp server busy for `{}` (attempt {} of {})",
            email.to,
            ctx.attempt(),
            ctx.max_attempts()
        ));
        return Err(JobError::retryable("smtp server busy"));
    }
    let size = email.body.len().to_string();
    ctx.log(
        Level::Info,
        "email sent",
        &[
            ("to", &email.to),
            ("subject", &email.subject),
            ("bytes", &size),
        ],
    );
    Ok(())
}

jobhost_sdk::plugin!(queues = EmailQueues, jobs = { SendEmail => send_email });
