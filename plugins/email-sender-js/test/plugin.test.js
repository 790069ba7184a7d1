// `node --test` runs the email sender's handlers natively, as the Rust example's tests do.

import assert from "node:assert/strict";
import { test } from "node:test";

import { deferred, fatal, retryable } from "@jobhost/sdk";
import { TestContext } from "@jobhost/sdk/testing";

import { FLAKY_SUCCEEDS_ON, GREYLIST_MS, sendEmail } from "../src/plugin.js";

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
