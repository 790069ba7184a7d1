// `node --test` runs the email sender's handlers natively, as the Rust example's tests do.

import assert from "node:assert/strict";
import { test } from "node:test";

import { deferred, fatal, retryAfter, retryable } from "@jobhost/sdk";
import { Response, TestContext } from "@jobhost/sdk/testing";

import declared, { FLAKY_SUCCEEDS_ON, GREYLIST_MS, dailyDigest, sendEmail } from "../src/plugin.js";

const email = (to) => ({ to, subject: "hi", body: "hello there" });

test("a good address is sent on the first attempt, logged, and receipted", async () => {
  const run = await new TestContext().run(sendEmail, email("alice@example.com"));
  assert.equal(run.error, undefined);
  assert.deepEqual(run.messages(), ["email sent"]);
  assert.equal(run.logs[0].field("to"), "alice@example.com");
  assert.equal(run.logs[0].field("bytes"), "11");
  assert.deepEqual(
    run.followUps.map((f) => [f.jobType, f.payload]),
    [["email.Receipt", { to: "alice@example.com", attempt: 1 }]],
  );
});

test("an address without an at sign is fatal", async () => {
  const run = await new TestContext().run(sendEmail, email("bob-at-example.com"));
  assert.deepEqual(run.error, fatal("invalid address `bob-at-example.com`"));
  assert.equal(run.followUps.length, 0, "nothing was sent");
});

test("a flaky address is retried until its third attempt", async () => {
  for (let attempt = 1; attempt < FLAKY_SUCCEEDS_ON; attempt++) {
    const run = await new TestContext().attempt(attempt).maxAttempts(4).run(sendEmail, email("flaky@example.com"));
    assert.deepEqual(run.error, retryable("smtp server busy"), `attempt ${attempt} meets a busy server`);
    assert.equal(run.logs[0].message, `smtp server busy for \`flaky@example.com\` (attempt ${attempt} of 4)`);
  }
  const third = await new TestContext().attempt(FLAKY_SUCCEEDS_ON).run(sendEmail, email("flaky@example.com"));
  assert.equal(third.error, undefined);
});

test("a greylisted address is deferred once, then sent", async () => {
  const first = await new TestContext().run(sendEmail, email("greylisted@example.com"));
  assert.deepEqual(first.error, deferred(GREYLIST_MS, "greylisted by the server of `greylisted@example.com`"));
  const back = await new TestContext().deferrals(1).run(sendEmail, email("greylisted@example.com"));
  assert.equal(back.error, undefined);
});

/** A TestContext with a relay configured, answered by `relay`. */
const relayed = (relay) =>
  new TestContext({ config: { relay_url: "http://relay.test/send", relay_token: "t0k3n" }, http: relay });

test("with a relay configured, the email is POSTed to it as JSON with the token", async () => {
  const run = await relayed(() => new Response(202)).run(sendEmail, email("alice@example.com"));
  assert.equal(run.error, undefined);
  assert.deepEqual(run.messages(), ["email relayed", "email sent"]);
  const [request] = run.requests;
  assert.equal(request.method, "POST");
  assert.equal(request.url, "http://relay.test/send");
  assert.equal(request.header("authorization"), "Bearer t0k3n");
  assert.deepEqual(request.json(), { to: "alice@example.com", subject: "hi", body: "hello there" });
});

test("a relay that answers 503 with Retry-After defers the email for as long", async () => {
  const busy = () => new Response(503, { headers: { "Retry-After": "30" }, body: "try later" });
  const run = await relayed(busy).run(sendEmail, email("alice@example.com"));
  assert.deepEqual(
    run.error,
    retryAfter(30_000, "POST http://relay.test/send answered 503 Service Unavailable, Retry-After 30s"),
  );
  assert.equal(run.followUps.length, 0, "no receipt for an email not sent");
});

test("a relay that refuses the email dead-letters it with the relay's answer", async () => {
  const refusing = () => new Response(422, { json: { error: "mailbox unknown" } });
  const run = await relayed(refusing).run(sendEmail, email("alice@example.com"));
  assert.deepEqual(
    run.error,
    fatal('POST http://relay.test/send answered 422 Unprocessable Content: {"error":"mailbox unknown"}'),
  );
});

test("the daily digest is scheduled at 07:00 in Paris and sends the team an email", async () => {
  const digest = declared.jobs.find((j) => j.name === "email.DailyDigestJs");
  assert.deepEqual(digest.schedule, {
    timing: { kind: "cron", expression: "0 7 * * *", tz: "Europe/Paris" },
    payload: '{"to":"team@example.com"}',
    catchUp: 0,
  });
  const run = await new TestContext().run(dailyDigest, JSON.parse(digest.schedule.payload));
  assert.equal(run.error, undefined);
  assert.deepEqual(
    run.followUps.map((f) => [f.jobType, f.payload.to, f.payload.subject]),
    [["email.SendEmailJs", "team@example.com", "Daily digest"]],
  );
});
