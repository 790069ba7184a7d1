//! Example plugin: `email.SendEmail` on queue `examples.emails` (4 attempts, exponential
//! waits from 1s to 8s, so the demo stays lively).
//!
//! The SMTP server is pretend, and its behaviour follows the address:
//! - an address without `@` is a fatal error (`invalid address `...``): dead-lettered at
//!   once, since no retry can fix it;
//! - an address containing `flaky` meets a busy server (retryable) on attempts 1 and 2,
//!   and is sent on attempt 3;
//! - any other address is sent on the first attempt.
//!
//! `email.DailyDigest` is a periodic job the plugin declares: the fleet enqueues one every
//! morning at 07:00 in Paris, exactly once across its hosts, and it sends the digest as a
//! follow-up `email.SendEmail`. The operator may move or disable it in the grants file
//! (`[schedules."email.DailyDigest"]`).
//!
//! `email.CampaignReport` is a batch callback: enqueue a campaign's emails as one batch
//! with `--on-complete email.CampaignReport --context '{"campaign": "..."}'`, and the
//! fleet enqueues it once every email of the batch was sent or dead-lettered; it logs the
//! campaign's counts.

use jobhost_sdk::batch::BatchCallback;
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

/// The team's daily digest, enqueued by the fleet every morning.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    name = "email.DailyDigest",
    queue = EmailQueues::Emails,
    cron = "0 7 * * *",
    tz = "Europe/Paris",
    payload = r#"{"to": "team@example.com"}"#
)]
struct DailyDigest {
    to: String,
}

/// What a campaign's batch is opened with, as its context.
#[derive(Debug, Serialize, Deserialize)]
struct Campaign {
    campaign: String,
}

/// A campaign's batch ended: every email was sent or dead-lettered.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "email.CampaignReport", queue = EmailQueues::Emails)]
struct CampaignReport(BatchCallback<Campaign>);

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

fn daily_digest(digest: DailyDigest, ctx: &JobContext) -> Result<(), JobError> {
    let email = SendEmail {
        to: digest.to,
        subject: "Daily digest".to_owned(),
        body: "Yesterday's emails went out.".to_owned(),
    };
    ctx.enqueue(&email)
        .map_err(|err| JobError::fatal(err.to_string()))?;
    Ok(())
}

fn campaign_report(
    CampaignReport(report): CampaignReport,
    ctx: &JobContext,
) -> Result<(), JobError> {
    ctx.log(
        Level::Info,
        "campaign finished",
        &[
            ("campaign", &report.context.campaign),
            ("sent", &report.completed),
            ("dead_lettered", &report.dead),
            ("of", &report.total),
        ],
    );
    Ok(())
}

jobhost_sdk::plugin!(
    queues = EmailQueues,
    jobs = {
        SendEmail => send_email,
        DailyDigest => daily_digest,
        CampaignReport => campaign_report,
    }
);

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

    #[test]
    fn the_daily_digest_fires_at_seven_in_paris_and_sends_the_payloads_address_a_digest() {
        use jobhost_sdk::schedule::Timing;
        let schedule = DailyDigest::schedule().expect("declared");
        assert_eq!(
            schedule.timing,
            Timing::Cron {
                expression: "0 7 * * *".to_owned(),
                tz: "Europe/Paris".to_owned()
            }
        );
        let digest: DailyDigest = serde_json::from_str(&schedule.payload).expect("its payload");
        let run = TestContext::new().run(daily_digest, digest);
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.follow_ups.len(), 1);
        assert_eq!(run.follow_ups[0].job_type, "email.SendEmail");
        assert_eq!(run.follow_ups[0].payload["to"], "team@example.com");
    }

    #[test]
    fn a_campaign_report_logs_what_its_batch_sent_and_dead_lettered() {
        let report: CampaignReport = serde_json::from_str(
            r#"{"batch_id": "b", "callback": "on_complete", "total": 3, "completed": 2,
                "dead": 1, "context": {"campaign": "welcome"}}"#,
        )
        .expect("the payload a batch hands its callback");
        let run = TestContext::new().run(campaign_report, report);
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.messages(), ["campaign finished"]);
        assert_eq!(run.logs[0].field("campaign"), Some("welcome"));
        assert_eq!(run.logs[0].field("sent"), Some("2"));
        assert_eq!(run.logs[0].field("dead_lettered"), Some("1"));
    }
}
