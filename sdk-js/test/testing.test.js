import assert from "node:assert/strict";
import { test } from "node:test";

import { EnqueueError, JobError, MAX_DELAY_MS, deferred, fatal, retryAfter, retryable } from "../src/index.js";
import { TestContext } from "../src/testing.js";

test("logs, follow-ups and the delivery's facts are recorded", async () => {
  const run = await new TestContext().attempt(2).maxAttempts(4).run((payload, ctx) => {
    ctx.info("sent", { to: payload.to, bytes: 11 });
    ctx.enqueue("email.Receipt", { to: payload.to }, { delayMs: 500 });
    assert.equal(ctx.attempt, 2);
    assert.equal(ctx.isLastAttempt(), false);
  }, { to: "a@b" });
  assert.equal(run.error, undefined);
  assert.deepEqual(run.messages(), ["sent"]);
  assert.equal(run.logs[0].field("bytes"), "11", "fields reach the host as strings");
  assert.deepEqual(run.followUps, [{ id: "follow-up-1", jobType: "email.Receipt", payload: { to: "a@b" }, delayMs: 500 }]);
});

test("a thrown JobError is the outcome, and anything else is retryable", async () => {
  const thrown = async (error) => (await new TestContext().run(() => { throw error; }, {})).error;
  assert.deepEqual(await thrown(fatal("no")), new JobError("fatal", "no"));
  assert.deepEqual(await thrown(new TypeError("x is undefined")), retryable("uncaught TypeError: x is undefined"));
  const later = await thrown(deferred(1_500, "busy"));
  assert.equal(later.kind, "deferred");
  assert.equal(later.delayMs, 1_500);
  assert.equal(later.retryAfter, false);
  assert.equal(retryAfter(10, "429").retryAfter, true);
});

test("an async handler is awaited", async () => {
  const run = await new TestContext().run(async () => {
    await Promise.resolve();
    throw retryable("later");
  }, {});
  assert.equal(run.error.kind, "retryable");
});

test("a deferral longer than a hold is fatal and says why", () => {
  const error = deferred(MAX_DELAY_MS + 1, "too long");
  assert.equal(error.kind, "fatal");
  assert.match(error.message, /exceeds the longest hold/);
});

test("a follow-up that cannot be sent is refused in the handler, as in the component", async () => {
  const run = await new TestContext().run((_, ctx) => {
    assert.throws(() => ctx.enqueue("a.B", {}, { delayMs: MAX_DELAY_MS + 1 }), EnqueueError);
    assert.throws(() => ctx.enqueue("a.B", undefined), EnqueueError);
    assert.throws(() => ctx.log("loud", "x"), /log level must be one of/);
  }, {});
  assert.equal(run.error, undefined);
  assert.equal(run.followUps.length, 0);
});
