// Example plugin: `email.SendEmailJs` on queue `examples.emails-js` (4 attempts, exponential
// waits from 1s to 8s), the semantics of the Rust `email-sender` plus a deferral and a
// follow-up. The SMTP server is pretend, and its behaviour follows the address:
// - an address without `@` is fatal (`invalid address ...`): no retry can fix it;
// - an address containing `flaky` meets a busy server (retryable) on attempts 1 and 2, and
//   is sent on attempt 3;
// - an address containing `greylisted` is deferred for 1s on its first delivery (the server
//   asks to come back later, which spends no attempt), and sent when it comes back;
// - once sent, an `email.Receipt` follow-up records the delivery;
// - an email with a `message_id` is unique by it: while one is queued, held or running (for
//   at most an hour), another enqueue of the same id is refused, naming the first job.
//
// `email.DailyDigestJs` is a periodic job the plugin declares, as the Rust example's
// `email.DailyDigest`: the fleet enqueues one every morning at 07:00 in Paris, exactly once
// across its hosts, and it sends the digest as a follow-up `email.SendEmailJs`.
//
// With the configuration value `relay_url` (`[plugins.email_sender_js.config]` in
// jobhost.toml, and the relay's origin in `allowed_outbound_hosts`), the email is POSTed
// there as JSON, with `relay_token` (a secret) as its bearer token when set, and the
// relay's answer decides the job by `Response.jobResult()`: a 503 with `Retry-After`
// defers it for as long, a 5xx retries it, a 4xx dead-letters it.

import { config, deferred, fatal, http, job, plugin, queue, retryable } from "@jobhost/sdk";

const emails = queue("examples.emails-js", {
  retry: { maxAttempts: 4, backoff: "exponential", base: "1s", max: "8s" },
});

/** The attempt on which a flaky address finally gets through. */
export const FLAKY_SUCCEEDS_ON = 3;

/** How long a greylisting server asks the sender to wait. */
export const GREYLIST_MS = 1_000;

/**
 * @param {{ to: string, subject: string, body: string }} email
 * @param {import("@jobhost/sdk").JobContext} ctx
 */
export async function sendEmail(email, ctx) {
  if (!email.to.includes("@")) {
    throw fatal(`invalid address \`${email.to}\``);
  }
  if (email.to.includes("flaky") && ctx.attempt < FLAKY_SUCCEEDS_ON) {
    ctx.warn(`smtp server busy for \`${email.to}\` (attempt ${ctx.attempt} of ${ctx.maxAttempts})`);
    throw retryable("smtp server busy");
  }
  if (email.to.includes("greylisted") && ctx.deferrals === 0) {
    throw deferred(GREYLIST_MS, `greylisted by the server of \`${email.to}\``);
  }
  const relay = config.get("relay_url");
  if (relay !== undefined) {
    const token = config.get("relay_token");
    const response = await http.post(relay, {
      json: { to: email.to, subject: email.subject, body: email.body },
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      timeout: "10s",
    });
    response.jobResult();
    ctx.info("email relayed", { to: email.to, status: response.status });
  }
  ctx.info("email sent", { to: email.to, subject: email.subject, bytes: email.body.length });
  ctx.enqueue("email.Receipt", { to: email.to, attempt: ctx.attempt });
}

/** @param {{ to: string }} digest */
export function dailyDigest(digest, ctx) {
  ctx.enqueue("email.SendEmailJs", { to: digest.to, subject: "Daily digest", body: "Yesterday's emails went out." });
}

/** @param {{ to: string, attempt: number }} receipt */
export function recordReceipt(receipt, ctx) {
  ctx.info("receipt recorded", { to: receipt.to, attempt: receipt.attempt });
}

export default plugin({
  name: "email-sender-js",
  queues: [emails],
  jobs: [
    job("email.SendEmailJs", { queue: emails, handler: sendEmail, unique: { key: "message_id", for: "1h" } }),
    job("email.Receipt", { queue: emails, handler: recordReceipt }),
    job("email.DailyDigestJs", {
      queue: emails,
      handler: dailyDigest,
      cron: "0 7 * * *",
      tz: "Europe/Paris",
      payload: { to: "team@example.com" },
    }),
  ],
});
