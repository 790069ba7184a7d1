// Declaring a plugin: its queues, its job types and their handlers, checked as they are
// declared. `jobhost build` imports the plugin in Node before it builds the component, so
// a declaration these rules refuse fails the build with every problem listed; the host
// checks the manifest again at load (it trusts no plugin), with the same rules.
//
// Keys, defaults and messages follow the Rust derives (docs/plugin-authors.md "Queues and
// jobs" and "Retries and backoff"), in camelCase: `maxAttempts` for `max_attempts`; the
// fleet-wide limits are read by limits.js, a job's schedule by schedule.js.

import { boolean, duration, integer, optionalDuration, unknownKeys, utf8Length } from "./checks.js";
import { MAX_DELAY_MS, describe, formatMs } from "./duration.js";
import { jobLimits, queueLimits } from "./limits.js";
import { schedule } from "./schedule.js";

const QUEUE_KEYS = [
  "prefetch",
  "durable",
  "queueType",
  "maxPriority",
  "messageTtl",
  "timeout",
  "retry",
  "concurrency",
  "rate",
  "burst",
];
const JOB_KEYS = [
  "queue",
  "handler",
  "retry",
  "timeout",
  "decode",
  "concurrency",
  "rate",
  "unique",
  "cron",
  "tz",
  "every",
  "payload",
  "catchUp",
];
const RETRY_KEYS = ["maxAttempts", "backoff", "delay", "base", "factor", "max", "jitter"];
const BACKOFFS = ["none", "fixed", "exponential"];
/** Which backoff each backoff-specific key belongs to. */
const OWNER = { delay: "fixed", base: "exponential", factor: "exponential", max: "exponential", jitter: "exponential" };
// Written as ranges, not `\p{Cc}`: the engine inside the component has no Unicode
// property escapes, and this module runs there too.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const RETRY_DEFAULTS = { maxAttempts: 3, base: 1_000, factor: 2.0, max: 300_000, jitter: true };

/** Every problem of one declaration, listed in one error. */
export class DeclarationError extends Error {
  constructor(owner, problems) {
    super(`${owner}:${problems.length === 1 ? ` ${problems[0]}` : `\n  - ${problems.join("\n  - ")}`}`);
    this.name = "DeclarationError";
    this.problems = problems;
  }
}

/**
 * A queue the plugin consumes.
 * @param {string} name the broker name, verbatim
 * @param {object} [options] `prefetch` (1..=65535, default 16), `durable` (default true),
 *   `queueType` ("classic", the default, or "quorum"), `maxPriority` (0..=255, default 10),
 *   `messageTtl`, `timeout` (durations), `retry` (a policy; none means one attempt), and
 *   fleet-wide `concurrency` (1..=1000 jobs at once) and `rate` (`"50/s"`, `"10/m"`,
 *   `"1000/h"`; at most 1000 a second) with `burst` (1..=10000, default the count)
 */
export function queue(name, options = {}) {
  const problems = [];
  const owner = `queue ${describe(name)}`;
  checkName(name, queueNameRule, problems);
  unknownKeys(options, QUEUE_KEYS, problems);
  const prefetch = integer(options, "prefetch", 16, 1, 65_535, problems);
  const durable = boolean(options, "durable", true, problems);
  const queueType = options.queueType ?? "classic";
  if (queueType !== "classic" && queueType !== "quorum") {
    problems.push(`\`queueType\` must be "classic" or "quorum", got ${describe(queueType)}`);
  } else if (queueType === "quorum" && options.durable === false) {
    problems.push(
      '`durable: false` does not apply to `queueType: "quorum"`: a quorum queue is always ' +
        'durable; remove `durable: false`, or write `queueType: "classic"`',
    );
  }
  const declared = {
    kind: "queue",
    name,
    prefetch,
    durable: queueType === "quorum" ? true : durable,
    queueType,
    maxPriority: integer(options, "maxPriority", 10, 0, 255, problems),
    messageTtlMs: optionalDuration(options, "messageTtl", problems),
    timeoutMs: optionalDuration(options, "timeout", problems),
    retry: optionalRetry(options.retry, problems),
    ...queueLimits(options, problems),
  };
  return finish(owner, declared, problems);
}

/**
 * A job type and its handler.
 * @param {string} name the job type carried in envelopes
 * @param {object} options `queue` (a `queue(...)` of the plugin, or its name), `handler`
 *   (`(payload, ctx) => void`, may be async), `retry` (replaces the queue's policy),
 *   `timeout`, `decode` (`(json) => payload`, throwing when the JSON is not a valid payload);
 *   per key of the payload `concurrency: { key, limit }`, `rate: { key, limit, burst,
 *   respectRetryAfter }` (no `key`: the job type as a whole) and `unique: { key, for }`;
 *   a periodic schedule `cron` with `tz`, or `every`, with `payload` and `catchUp`
 */
export function job(name, options = {}) {
  const problems = [];
  const owner = `job ${describe(name)}`;
  checkName(name, jobTypeRule, problems);
  unknownKeys(options, JOB_KEYS, problems);
  const queueName = typeof options.queue === "string" ? options.queue : options.queue?.name;
  if (typeof queueName !== "string") {
    problems.push(`\`queue\` must be a queue of the plugin (from \`queue(...)\`) or its name, got ${describe(options.queue)}`);
  }
  if (typeof options.handler !== "function") {
    problems.push(`\`handler\` must be a function \`(payload, ctx) => void\`, got ${describe(options.handler)}`);
  }
  if (options.decode !== undefined && typeof options.decode !== "function") {
    problems.push(`\`decode\` must be a function \`(json) => payload\`, got ${describe(options.decode)}`);
  }
  const declared = {
    kind: "job",
    name,
    queue: queueName,
    handler: options.handler,
    decode: options.decode,
    retry: optionalRetry(options.retry, problems),
    timeoutMs: optionalDuration(options, "timeout", problems),
    ...jobLimits(options, problems),
    schedule: schedule(options, problems),
  };
  return finish(owner, declared, problems);
}

/**
 * The plugin: what `src/plugin.js` exports as its default.
 * @param {{ name: string, queues: object[], jobs: object[] }} declaration
 */
export function plugin({ name, queues = [], jobs = [], ...rest }) {
  const problems = [];
  const owner = `plugin ${describe(name)}`;
  unknownKeys(rest, [], problems);
  if (typeof name !== "string" || name.trim() === "") {
    problems.push(`\`name\` must be a non-empty string, got ${describe(name)}`);
  } else if (utf8Length(name) > 200 || CONTROL.test(name)) {
    problems.push("`name` must be at most 200 bytes, without control characters");
  }
  const queueNames = new Set();
  for (const q of queues) {
    if (q?.kind !== "queue") {
      problems.push(`\`queues\` holds ${describe(q)}, which is not a \`queue(...)\``);
    } else if (queueNames.has(q.name)) {
      problems.push(`queue ${describe(q.name)} is declared twice`);
    } else {
      queueNames.add(q.name);
    }
  }
  const jobNames = new Set();
  for (const j of jobs) {
    if (j?.kind !== "job") {
      problems.push(`\`jobs\` holds ${describe(j)}, which is not a \`job(...)\``);
      continue;
    }
    if (jobNames.has(j.name)) problems.push(`job ${describe(j.name)} is declared twice`);
    jobNames.add(j.name);
    if (!queueNames.has(j.queue)) {
      problems.push(
        `job ${describe(j.name)} goes to queue ${describe(j.queue)}, which is not one of the ` +
          `plugin's queues (${[...queueNames].map(describe).join(", ") || "none"})`,
      );
    }
  }
  if (jobNames.size === 0) problems.push("`jobs` is empty: a plugin handles at least one job type");
  return finish(owner, { kind: "plugin", name, queues: [...queues], jobs: [...jobs] }, problems);
}

/**
 * A retry policy in the grammar of docs/plugin-authors.md, with its defaults: `{}` is three
 * attempts, exponential from 1s by a factor 2.0 up to 5m, with jitter.
 * @returns {{ maxAttempts: number, backoff: { kind: "none" } | { kind: "fixed", delayMs: number } |
 *   { kind: "exponential", baseMs: number, factor: number, maxMs: number, jitter: boolean } } | undefined}
 */
function optionalRetry(retry, problems) {
  if (retry === undefined) return undefined;
  if (retry === null || typeof retry !== "object" || Array.isArray(retry)) {
    problems.push(`\`retry\` must be an object such as \`{ maxAttempts: 3 }\`, got ${describe(retry)}`);
    return undefined;
  }
  const before = problems.length;
  const local = [];
  unknownKeys(retry, RETRY_KEYS, local);
  const maxAttempts = integer(retry, "maxAttempts", RETRY_DEFAULTS.maxAttempts, 1, 2 ** 32 - 1, local, "at least 1 (1 means no retries)");
  const kind = retry.backoff ?? "exponential";
  if (!BACKOFFS.includes(kind)) {
    local.push(`\`backoff\` must be "none", "fixed" or "exponential", got ${describe(kind)}`);
  } else {
    for (const [key, owner] of Object.entries(OWNER)) {
      if (retry[key] === undefined || owner === kind) continue;
      local.push(
        kind === "none"
          ? `\`${key}\` does not apply to \`backoff: "none"\`, which takes no other keys: remove \`${key}\`, or write \`backoff: "${owner}"\``
          : `\`${key}\` applies only to \`backoff: "${owner}"\`, but this policy is \`backoff: "${kind}"\`${retry.backoff === undefined ? " (the default)" : ""}: remove \`${key}\`, or write \`backoff: "${owner}"\``,
      );
    }
  }
  let backoff;
  if (kind === "none") {
    backoff = { kind };
  } else if (kind === "fixed") {
    if (retry.delay === undefined) {
      local.push('`backoff: "fixed"` needs `delay`, the wait before every retry: add e.g. `delay: "30s"`');
    }
    backoff = { kind, delayMs: holdDelay(retry, "delay", undefined, local) };
  } else if (kind === "exponential") {
    const baseMs = holdDelay(retry, "base", RETRY_DEFAULTS.base, local);
    const maxMs = holdDelay(retry, "max", RETRY_DEFAULTS.max, local);
    const factor = retry.factor ?? RETRY_DEFAULTS.factor;
    if (typeof factor !== "number" || !Number.isFinite(factor) || factor <= 0) {
      local.push(`\`factor\` must be finite and greater than 0, got ${describe(factor)}: write e.g. \`factor: 2.0\``);
    }
    if (baseMs !== undefined && maxMs !== undefined && baseMs > maxMs) {
      local.push(
        `\`base\` (${formatMs(baseMs)}${retry.base === undefined ? ", the default" : ""}) exceeds \`max\` ` +
          `(${formatMs(maxMs)}${retry.max === undefined ? ", the default" : ""}): the first wait cannot be ` +
          "longer than the cap; lower `base` or raise `max`",
      );
    }
    backoff = { kind, baseMs, factor, maxMs, jitter: boolean(retry, "jitter", RETRY_DEFAULTS.jitter, local) };
  }
  problems.push(...local.map((problem) => `retry: ${problem}`));
  return problems.length === before ? { maxAttempts, backoff } : undefined;
}

/** A retry wait: a duration no longer than a broker hold queue can hold a job. */
function holdDelay(options, key, fallback, problems) {
  const ms = options[key] === undefined ? fallback : duration(options, key, problems);
  if (ms !== undefined && ms > MAX_DELAY_MS) {
    problems.push(
      `\`${key}\` of ${formatMs(ms)} exceeds the longest hold of ${formatMs(MAX_DELAY_MS)} (about 24.8 days, ` +
        "`MAX_DELAY_MS`): a retry waits in a broker hold queue, which cannot hold a job longer",
    );
    return undefined;
  }
  return ms;
}

function checkName(name, rule, problems) {
  if (typeof name !== "string") {
    problems.push(`the name must be a string, got ${describe(name)}`);
    return;
  }
  const reason = rule(name);
  if (reason !== undefined) problems.push(`the name is refused: ${reason}`);
}

/** The host's rule for job types, which travel in the AMQP `type` property. */
function jobTypeRule(name) {
  if (name === "") return "it is empty";
  if (utf8Length(name) > 255) return "it is longer than 255 bytes";
  if (CONTROL.test(name)) return "it contains control characters";
  return undefined;
}

/** The host's rule for queue names (its hold and dead-letter queues are named after them). */
function queueNameRule(name) {
  if (name === "") return "it is empty";
  if (/[\u0000-\u001f\u007f-\u009f\s]/.test(name)) return "it contains whitespace or control characters";
  if (name.startsWith("amq.")) return "the `amq.` prefix is reserved by the broker";
  if (name.endsWith(".dead") || name.includes(".deferred.")) return "it looks like a dead-letter or hold queue name";
  return undefined;
}

function finish(owner, declared, problems) {
  if (problems.length > 0) throw new DeclarationError(owner, problems);
  return Object.freeze(declared);
}
