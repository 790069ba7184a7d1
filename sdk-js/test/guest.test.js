// The component side (src/guest.js) in Node: `jobhost:plugin/host@0.5.0`,
// `wasi:config/store@0.2.0-rc.1` and `wasi:http` (test/wasi-http.test.js drives the
// latter), which exist only inside the component, are stubbed
// through a module hook that records every host call, so
// the WIT shapes componentize-js expects (BigInt durations, `{ tag, val }` variants, thrown
// errors) are checked here and not only end to end (host/tests/cli/cli_js.rs).

import assert from "node:assert/strict";
import { register } from "node:module";
import { test } from "node:test";

import { deferred, fatal, job, plugin, queue } from "../src/index.js";

globalThis.hostCalls = [];
const stub = `data:text/javascript,${encodeURIComponent(
  "export const log = (...args) => globalThis.hostCalls.push(['log', ...args]);\n" +
    "export const enqueue = (...args) => { globalThis.hostCalls.push(['enqueue', ...args]); return 'job-2'; };\n",
)}`;
globalThis.configValues = { region: "eu-west-1" };
const configStub = `data:text/javascript,${encodeURIComponent(
  "export const get = (key) => {\n" +
    "  if (key === 'sealed') { const e = new Error('err'); e.payload = { tag: 'upstream', val: 'vault is sealed' }; throw e; }\n" +
    "  return globalThis.configValues[key];\n" +
    "};\n",
)}`;
const httpStub = `data:text/javascript,${encodeURIComponent(
  "export const handle = () => { throw new Error('no network in this test'); };\n" +
    "export class Fields {} export class IncomingBody {} export class OutgoingBody {}\n" +
    "export class OutgoingRequest {} export class RequestOptions {} export const httpErrorCode = () => undefined;\n",
)}`;
register(
  `data:text/javascript,${encodeURIComponent(
    `export async function resolve(specifier, context, next) {
       if (specifier === "jobhost:plugin/host@0.5.0") return { url: ${JSON.stringify(stub)}, shortCircuit: true };
       if (specifier === "wasi:config/store@0.2.0-rc.1") return { url: ${JSON.stringify(configStub)}, shortCircuit: true };
       if (specifier.startsWith("wasi:http/")) return { url: ${JSON.stringify(httpStub)}, shortCircuit: true };
       return next(specifier, context);
     }`,
  )}`,
);
const { serve } = await import("../src/guest.js");

const work = queue("work", { retry: { maxAttempts: 4, base: "1s", max: "8s" }, timeout: "30s" });
const handler = serve(
  plugin({
    name: "p",
    queues: [work, queue("slow", { retry: { backoff: "fixed", delay: "2s" } })],
    jobs: [
      job("a.Send", {
        queue: work,
        handler: (payload, ctx) => {
          if (payload.to === "later") throw deferred(1_500, "greylisted");
          if (payload.to === "nobody") throw fatal("invalid address");
          ctx.info("sent", { to: payload.to });
          ctx.enqueue("a.Receipt", { to: payload.to }, { delayMs: 250 });
        },
      }),
      job("a.Receipt", { queue: "slow", handler: () => {} }),
    ],
  }),
);
const limited = serve(
  plugin({
    name: "limited",
    queues: [queue("work", { concurrency: 4, rate: "50/s", burst: 20 }), queue("slow")],
    jobs: [
      job("a.Charge", {
        queue: "slow",
        handler: () => {},
        concurrency: { key: "customer_id", limit: 2 },
        rate: { key: "customer_id", limit: "10/m", respectRetryAfter: true },
        unique: { key: "order_id", for: "10m" },
      }),
      job("a.Daily", { queue: "slow", handler: () => {}, cron: "0 7 * * *", tz: "Europe/Paris", payload: { kind: "daily" }, catchUp: 3 }),
      job("a.Tick", { queue: "slow", handler: () => {}, every: "30s", rate: { limit: "1/s" } }),
    ],
  }),
);

const delivery = (jobType) => ({
  jobId: "id-1",
  jobType,
  queue: "work",
  attempt: 1,
  maxAttempts: 4,
  deferrals: 0,
  priority: 0,
  age: 5n,
});
const json = (value) => new TextEncoder().encode(JSON.stringify(value));

test("the manifest carries the declarations in the WIT's shapes", () => {
  const manifest = handler.manifest();
  assert.deepEqual(manifest.queues[0].retry, {
    maxAttempts: 4,
    backoff: { tag: "exponential", val: { base: 1_000n, factor: 2, max: 8_000n, jitter: true } },
  });
  assert.deepEqual(manifest.queues[1].retry, { maxAttempts: 3, backoff: { tag: "fixed", val: 2_000n } });
  assert.equal(manifest.queues[0].timeout, 30_000n);
  assert.equal(manifest.queues[0].queueType, "classic");
  assert.deepEqual(
    manifest.jobs.map((j) => [j.name, j.queue, j.retry, j.concurrency, j.rate, j.unique, j.schedule]),
    [
      ["a.Send", "work", undefined, undefined, undefined, undefined, undefined],
      ["a.Receipt", "slow", undefined, undefined, undefined, undefined, undefined],
    ],
  );
});

test("the manifest carries the limits and schedules in the WIT's shapes", () => {
  const { queues, jobs } = limited.manifest();
  assert.deepEqual([queues[0].concurrency, queues[0].rate], [4, { count: 50, unit: "second", burst: 20 }]);
  assert.deepEqual([queues[1].concurrency, queues[1].rate], [undefined, undefined]);
  const [charge, daily, tick] = jobs;
  assert.deepEqual(charge.concurrency, { key: "customer_id", limit: 2 });
  assert.deepEqual(charge.rate, { key: "customer_id", rate: { count: 10, unit: "minute", burst: 10 }, respectRetryAfter: true });
  assert.deepEqual(charge.unique, { key: "order_id", for: 600_000n });
  assert.equal(charge.schedule, undefined);
  assert.deepEqual(daily.schedule, {
    timing: { tag: "cron", val: { expression: "0 7 * * *", tz: "Europe/Paris" } },
    payload: '{"kind":"daily"}',
    catchUp: 3,
  });
  assert.deepEqual(tick.schedule, { timing: { tag: "every", val: 30_000n }, payload: "{}", catchUp: 0 });
  assert.deepEqual(tick.rate, { key: undefined, rate: { count: 1, unit: "second", burst: 1 }, respectRetryAfter: false });
});

test("a completed job logs and enqueues through the host's imports", async () => {
  globalThis.hostCalls = [];
  await handler.handle(delivery("a.Send"), json({ to: "a@b" }));
  assert.deepEqual(globalThis.hostCalls[0], ["log", "info", "sent", [["to", "a@b"]]]);
  const [, jobType, payload, delay] = globalThis.hostCalls[1];
  assert.deepEqual([jobType, new TextDecoder().decode(payload), delay], ["a.Receipt", '{"to":"a@b"}', 250n]);
});

test("each way a job fails is thrown as the WIT's job-error", async () => {
  await assert.rejects(handler.handle(delivery("a.Send"), json({ to: "later" })), {
    tag: "deferred",
    val: { delay: 1_500n, reason: "greylisted", retryAfter: false },
  });
  await assert.rejects(handler.handle(delivery("a.Send"), json({ to: "nobody" })), {
    tag: "fatal",
    val: "invalid address",
  });
  await assert.rejects(handler.handle(delivery("a.Send"), new TextEncoder().encode("{not json")), (error) => error.tag === "decode");
  await assert.rejects(handler.handle(delivery("x.Unknown"), json({})), (error) =>
    error.tag === "fatal" && error.val.startsWith("plugin has no handler for job type `x.Unknown`"),
  );
});

test("config reads go to wasi:config/store, and a failing source is retryable as in Rust", async () => {
  const { config, retryable: retry } = await import("../src/index.js");
  assert.equal(config.get("region"), "eu-west-1");
  assert.equal(config.get("nothing"), undefined);
  assert.throws(() => config.get("sealed"), retry("the configuration source failed: vault is sealed"));
});
