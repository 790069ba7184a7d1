import assert from "node:assert/strict";
import { test } from "node:test";

import { DeclarationError, MAX_DELAY_MS, job, parseDuration, plugin, queue } from "../src/index.js";

const handler = () => {};

test("durations follow the grammar of the Rust SDK", () => {
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("30"), 30_000);
  assert.equal(parseDuration(" 2 m "), 120_000);
  assert.equal(parseDuration("1d"), 86_400_000);
  for (const bad of ["", "0s", "-5s", "1.5s", "1h30m", "3w"]) {
    assert.throws(() => parseDuration(bad), TypeError, `"${bad}" is refused`);
  }
});

test("an empty retry policy takes every default of the chapter", () => {
  const q = queue("work", { retry: {} });
  assert.deepEqual(q.retry, {
    maxAttempts: 3,
    backoff: { kind: "exponential", baseMs: 1_000, factor: 2.0, maxMs: 300_000, jitter: true },
  });
  assert.equal(q.prefetch, 16);
  assert.equal(q.maxPriority, 10);
  assert.equal(queue("plain").retry, undefined, "no retry means no retries");
});

test("a key of another backoff is refused naming the backoff it belongs to", () => {
  assert.throws(
    () => queue("work", { retry: { delay: "5s" } }),
    (error) =>
      error instanceof DeclarationError &&
      error.message.includes('`delay` applies only to `backoff: "fixed"`, but this policy is `backoff: "exponential"` (the default)'),
  );
});

test("every problem of a declaration is listed in one error", () => {
  assert.throws(
    () => queue("work", { prefetch: 0, retry: { maxAttempts: 0, backoff: "fixed" } }),
    (error) =>
      error.problems.length === 3 &&
      error.problems[0] === "`prefetch` must be between 1 and 65535, got 0" &&
      error.problems[1] === "retry: `maxAttempts` must be at least 1 (1 means no retries), got 0" &&
      error.problems[2].startsWith('retry: `backoff: "fixed"` needs `delay`'),
  );
});

test("a base above the cap and a wait longer than a hold are refused", () => {
  assert.throws(() => queue("q", { retry: { base: "10m" } }), /`base` \(600s\) exceeds `max` \(300s, the default\)/);
  assert.throws(() => queue("q", { retry: { backoff: "fixed", delay: "30d" } }), /exceeds the longest hold/);
  assert.ok(MAX_DELAY_MS < 30 * 86_400_000);
});

test("a job must go to one of its plugin's queues, and names are checked as the host does", () => {
  const work = queue("work");
  assert.throws(
    () => plugin({ name: "p", queues: [work], jobs: [job("a.B", { queue: "elsewhere", handler })] }),
    /job "a.B" goes to queue "elsewhere", which is not one of the plugin's queues \("work"\)/,
  );
  assert.throws(() => queue("work.dead"), /looks like a dead-letter or hold queue name/);
  assert.throws(() => job("a\nB", { queue: work, handler }), /control characters/);
  assert.throws(() => job("a.B", { queue: work, handler: "nope" }), /`handler` must be a function/);
  assert.throws(() => queue("q", { prefech: 4 }), /unknown key `prefech`/);
});

test("a valid plugin keeps its declarations", () => {
  const work = queue("work", { retry: { backoff: "fixed", delay: "2s", maxAttempts: 5 }, timeout: "30s" });
  const declared = plugin({ name: "p", queues: [work], jobs: [job("a.B", { queue: work, handler })] });
  assert.equal(declared.kind, "plugin");
  assert.deepEqual(declared.queues[0].retry, { maxAttempts: 5, backoff: { kind: "fixed", delayMs: 2_000 } });
  assert.equal(declared.queues[0].timeoutMs, 30_000);
  assert.equal(declared.jobs[0].queue, "work");
});

test("a queue declares a fleet-wide cap and a rate whose burst defaults to its count", () => {
  assert.deepEqual(
    [queue("q", { concurrency: 4, rate: "50/s", burst: 20 }), queue("q", { rate: "100000/h" }), queue("q")].map((q) => [
      q.concurrency,
      q.rate,
    ]),
    [
      [4, { count: 50, unit: "second", burst: 20 }],
      [undefined, { count: 100_000, unit: "hour", burst: 10_000 }],
      [undefined, undefined],
    ],
  );
  assert.deepEqual(queue("q", { rate: "10/m" }).rate, { count: 10, unit: "minute", burst: 10 });
  assert.equal(queue("q", { rate: "1000/s" }).rate.count, 1_000, "the fastest rate");
});

test("each bound of a queue's limits is refused saying why", () => {
  for (const [options, why] of [
    [{ concurrency: 0 }, "`concurrency` must be between 1 and 1000, got 0"],
    [{ concurrency: 1001 }, "`concurrency` must be between 1 and 1000, got 1001"],
    [{ concurrency: 2.5 }, "`concurrency` must be between 1 and 1000, got 2.5"],
    [{ rate: "10" }, '`rate` "10": write it as COUNT/UNIT, e.g. `10/s`, `10/m` or `10/h`'],
    [{ rate: "10/d" }, '`rate` "10/d": the unit must be `s`, `m` or `h`'],
    [{ rate: "0/s" }, '`rate` "0/s": the count must be 1 to 100000'],
    [{ rate: "100001/h" }, '`rate` "100001/h": the count must be 1 to 100000'],
    [{ rate: "1001/s" }, '`rate` "1001/s": at most 1000 jobs a second'],
    [{ rate: "60001/m" }, '`rate` "60001/m": at most 1000 jobs a second'],
    [{ rate: 50 }, '`rate` must be a string such as "50/s", got 50'],
    [{ rate: "10/s", burst: 0 }, "`burst` must be between 1 and 10000, got 0"],
    [{ rate: "10/s", burst: 10_001 }, "`burst` must be between 1 and 10000, got 10001"],
    [{ burst: 5 }, '`burst` without a `rate`: write `rate: "10/s"` too'],
  ]) {
    assert.throws(() => queue("q", options), (error) => error.problems?.[0] === why, why);
  }
});

test("a job declares a cap, a rate and uniqueness per key of its payload", () => {
  const j = job("a.B", {
    queue: "work",
    handler,
    concurrency: { key: "customer_id", limit: 2 },
    rate: { key: "customer_id", limit: "10/s", burst: 5, respectRetryAfter: true },
    unique: { key: "order_id", for: "10m" },
  });
  assert.deepEqual(j.concurrency, { key: "customer_id", limit: 2 });
  assert.deepEqual(j.rate, { key: "customer_id", rate: { count: 10, unit: "second", burst: 5 }, respectRetryAfter: true });
  assert.deepEqual(j.unique, { key: "order_id", forMs: 600_000 });
  const whole = job("a.B", { queue: "work", handler, rate: { limit: "100/m" } }).rate;
  assert.deepEqual(whole, { key: undefined, rate: { count: 100, unit: "minute", burst: 100 }, respectRetryAfter: false }, "without a key, the job type as a whole");
  const plain = job("a.B", { queue: "work", handler });
  assert.deepEqual([plain.concurrency, plain.rate, plain.unique, plain.schedule], [undefined, undefined, undefined, undefined]);
});

test("each bound of a job's limits is refused, every problem in one error", () => {
  assert.throws(
    () =>
      job("a.B", {
        queue: "work",
        handler,
        concurrency: { limit: 0 },
        rate: { key: "a.b", limit: "10/s", burst: 20_000, respectRetryAfter: 1 },
        unique: { key: "k", for: "30d", ttl: "1m" },
      }),
    (error) =>
      assert.deepEqual(error.problems, [
        'concurrency: needs `key`, the top-level payload field whose value is the key: add e.g. `key: "customer_id"`',
        "concurrency: `limit` must be between 1 and 1000, got 0",
        'rate: `key` "a.b": it must be 1 to 64 ASCII letters, digits, `_` or `-`, the name of a top-level payload field',
        "rate: `burst` must be between 1 and 10000, got 20000",
        "rate: `respectRetryAfter` must be true or false, got 1",
        "unique: unknown key `ttl`; the keys are `key`, `for`",
        "unique: `for` of 2592000s is longer than a job can be held, 2147483.647s (about 24.8 days, `MAX_DELAY_MS`)",
      ]) ?? true,
  );
  for (const [options, why] of [
    [{ concurrency: 2 }, '`concurrency` must be an object such as `{ key: "customer_id", limit: 2 }`, got 2'],
    [{ concurrency: { key: "k" } }, "concurrency: needs `limit`, how many jobs of one key run at once: add e.g. `limit: 2`"],
    [{ concurrency: { key: "k".repeat(65), limit: 1 } }, `concurrency: \`key\` "${"k".repeat(65)}": it must be 1 to 64 ASCII letters, digits, \`_\` or \`-\`, the name of a top-level payload field`],
    [{ rate: { key: "k" } }, 'rate: needs `limit`, the rate of one key: add e.g. `limit: "10/s"`'],
    [{ rate: { limit: "2000/s" } }, 'rate: `limit` "2000/s": at most 1000 jobs a second'],
    [{ unique: { key: "k" } }, 'unique: needs `for`, how long a job holds its key at most: add e.g. `for: "10m"`'],
    [{ unique: { key: "k", for: "0s" } }, "unique: `for`: zero duration `0s`: a duration must be positive"],
  ]) {
    assert.throws(() => job("a.B", { queue: "work", handler, ...options }), (error) => error.problems?.[0] === why, why);
  }
});

test("a job declares a cron schedule in a time zone, or a period, with the derive's defaults", () => {
  const cron = job("a.Daily", { queue: "work", handler, cron: "0 7 * * *", tz: "Europe/Paris", payload: { kind: "daily" }, catchUp: 3 });
  assert.deepEqual(cron.schedule, {
    timing: { kind: "cron", expression: "0 7 * * *", tz: "Europe/Paris" },
    payload: '{"kind":"daily"}',
    catchUp: 3,
  });
  const every = job("a.Tick", { queue: "work", handler, every: "30s" });
  assert.deepEqual(every.schedule, { timing: { kind: "every", periodMs: 30_000 }, payload: "{}", catchUp: 0 });
  assert.equal(job("a.Utc", { queue: "work", handler, cron: "*/5 * * * * *" }).schedule.timing.tz, "", "UTC, as an empty tz");
  assert.equal(job("a.Most", { queue: "work", handler, every: "1s", catchUp: 1000 }).schedule.catchUp, 1000);
});

test("a schedule that cannot be is refused saying why", () => {
  for (const [options, why] of [
    [{ cron: "0 7 * *" }, '`cron` "0 7 * *" has 4 fields: write five (minute hour day-of-month month day-of-week) or six (seconds first)'],
    [{ cron: "0 0 7 * * * *" }, '`cron` "0 0 7 * * * *" has 7 fields: write five (minute hour day-of-month month day-of-week) or six (seconds first)'],
    [{ every: "500ms" }, "`every` must be at least 1s, got 500ms"],
    [{ every: "1m", tz: "UTC" }, "`tz` applies to `cron` only, not to `every`"],
    [{ every: "1m", cron: "* * * * *" }, "write one of `cron` and `every`, not both"],
    [{ payload: {} }, '`payload` without a schedule: write `cron: "..."` or `every: "..."` too'],
    [{ catchUp: 1 }, '`catchUp` without a schedule: write `cron: "..."` or `every: "..."` too'],
    [{ every: "1m", catchUp: 1001 }, "`catchUp` must be between 0 and 1000, got 1001"],
    [{ every: "1m", catchUp: -1 }, "`catchUp` must be between 0 and 1000, got -1"],
    [{ every: "1m", payload: 5n }, "`payload` must be a JSON value such as `{ kind: \"daily\" }`, got 5n"],
    [{ every: "1m", payload: "x".repeat(65_536) }, "`payload` is 65538 bytes of JSON; a schedule's payload may have at most 65536"],
    [{ cron: 7 }, '`cron` must be a string such as "0 7 * * *", got 7'],
    [{ cron: "0 7 * * *", tz: 1 }, '`tz` must be an IANA time zone name such as "Europe/Paris", got 1'],
  ]) {
    assert.throws(() => job("a.B", { queue: "work", handler, ...options }), (error) => error.problems?.[0] === why, why);
  }
});
