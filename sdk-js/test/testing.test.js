import assert from "node:assert/strict";
import { test } from "node:test";

import { EnqueueError, JobError, MAX_DELAY_MS, deferred, fatal, retryAfter, retryable } from "../src/index.js";
import { Response, TestContext } from "../src/testing.js";

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

test("config values are the test's, and none outside a run or for an unset key", async () => {
  const { config } = await import("../src/index.js");
  const handler = () => {
    assert.equal(config.get("region"), "eu-west-1");
    assert.equal(config.require("token"), "t0k3n");
    assert.equal(config.get("unset"), undefined);
  };
  const run = await new TestContext({ config: { region: "eu-west-1" } }).config("token", "t0k3n").run(handler, {});
  assert.equal(run.error, undefined);
  assert.equal(config.get("region"), undefined, "outside a run");
});

test("a missing required config value is fatal and names the key", async () => {
  const { config } = await import("../src/index.js");
  const run = await new TestContext().run(() => config.require("endpoint"), {});
  assert.deepEqual(
    run.error,
    fatal(
      "the plugin needs the configuration value `endpoint`: set it in `jobhost.toml` under " +
        "`[plugins.<plugin file name>.config]` (or `.secrets`)",
    ),
  );
});

test("a test without a responder fails requests as not granted, and records them", async () => {
  const { http } = await import("../src/index.js");
  const run = await new TestContext().run(async () => (await http.get("http://api.test/")).jobResult(), {});
  assert.equal(run.error.kind, "fatal");
  assert.match(run.error.message, /this test answers no request/);
  assert.equal(run.requests.length, 1, "the request is recorded all the same");
});

test("overlapping runs keep their own config and responder", async () => {
  const { config, http } = await import("../src/index.js");
  const handler = async (_, ctx) => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    const response = await http.get(`http://api.test/${config.get("who")}`);
    ctx.info(response.text());
  };
  const context = (who) =>
    new TestContext({ config: { who }, http: (request) => new Response(200, { body: `${who}:${request.url}` }) });
  const [a, b] = await Promise.all([context("a").run(handler, {}), context("b").run(handler, {})]);
  assert.deepEqual(a.messages(), ["a:http://api.test/a"]);
  assert.deepEqual(b.messages(), ["b:http://api.test/b"]);
});

test("a host that refuses follow-ups refuses them in the handler", async () => {
  const run = await new TestContext().refuseFollowUps("no plugin handles `x.Y`").run((_, ctx) => ctx.enqueue("x.Y", {}), {});
  assert.equal(run.error.kind, "retryable");
  assert.equal(run.error.message, "uncaught EnqueueError: no plugin handles `x.Y`");
});
