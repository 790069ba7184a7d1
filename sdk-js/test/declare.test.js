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
