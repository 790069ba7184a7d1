//! Example plugin: `email.SendEmail` on queue `examples.emails` (4 attempts, exponential
//! waits from 1s to 8s, so the demo stays lively).
//!
//! The SMTP server is pretend, and its behaviour follows the address:
//! - an address without `@` is a fatal error (`invalid address `...``): dead-lettered at
//!   once, since no retry can fix it;
//! - an address containing `flaky` meets a busy server (retryable) on attempts 1 and 2,
//!   and is sent on attempt 3;
//! - any other address is sent on the first attempt.

use jobhost_sdk::prelude::*;
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
    ctx.log(
        Level::Info,
        "email sent",
        &[
            ("to", &email.to),
            ("subject", &email.subject),
            ("bytes", &email.body.len()),
        ],
    );
    Ok(())
}

jobhost_sdk::plugin!(queues = EmailQueues, jobs = { SendEmail => send_email });

#[cfg(test)]
mod tests {
    use jobhost_sdk::testing::TestContext;

    use super::*;

    fn email(to: &str) -> SendEmail {
        SendEmail {
            to: to.to_owned(),
            subject: "hi".to_owned(),
            body: "hello there".to_owned(),
        }
    }

    #[test]
    fn a_good_address_is_sent_on_the_first_attempt_and_logged() {
        let run = TestContext::new().run(send_email, email("alice@example.com"));
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.messages(), ["email sent"]);
        assert_eq!(run.logs[0].field("to"), Some("alice@example.com"));
        assert_eq!(run.logs[0].field("bytes"), Some("11"));
    }

    #[test]
    fn an_address_without_an_at_sign_is_fatal() {
        let run = TestContext::new().run(send_email, email("bob-at-example.com"));
        assert_eq!(
            run.result,
            Err(JobError::fatal("invalid address `bob-at-example.com`"))
        );
        assert!(run.logs.is_empty(), "nothing was sent");
    }

    #[test]
    fn a_flaky_address_is_retried_until_its_third_attempt() {
        for attempt in 1..FLAKY_SUCCEEDS_ON {
            let run = TestContext::new()
                .attempt(attempt)
                .run(send_email, email("flaky@example.com"));
            assert_eq!(
                run.result,
                Err(JobError::retryable("smtp server busy")),
                "attempt {attempt} meets a busy server"
            );
            assert_eq!(
                run.logs[0].message,
                format!("smtp server busy for `flaky@example.com` (attempt {attempt} of 4)"),
                "the queue's policy gives 4 attempts"
            );
        }
        let third = TestContext::new()
            .attempt(FLAKY_SUCCEEDS_ON)
            .run(send_email, email("flaky@example.com"));
        assert_eq!(third.result, Ok(()));
    }
}
