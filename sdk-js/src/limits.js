// Fleet-wide limits (the Rust SDK's sdk/src/limits.rs, docs/flow-control.md), in camelCase:
// on a queue, `concurrency` (jobs running at once) and `rate` ("50/s", "10/m", "1000/h")
// with `burst`; on a job type, per key of its payload, `concurrency: { key, limit }`,
// `rate: { key, limit, burst, respectRetryAfter }` (without `key`, the job type as a
// whole) and `unique: { key, for }`. The same grammar, defaults and bounds as the derives,
// so the manifest of a JavaScript plugin says what a Rust plugin with the same
// declarations says; the operator's grants file may override the caps and rates.

import { boolean, duration, integer, unknownKeys } from "./checks.js";
import { MAX_DELAY_MS, describe, formatMs } from "./duration.js";

/** The largest cap: at most this many jobs of a queue, or of one key, run at once. */
const MAX_CONCURRENCY = 1000;
/** The largest count of a rate. */
const MAX_RATE_COUNT = 100_000;
/** The fastest rate, in jobs a second. */
const MAX_PER_SECOND = 1000;
/** The largest burst: a bucket saves up at most this many jobs. */
const MAX_BURST = 10_000;
/** A key names a top-level payload field. */
const KEY = /^[A-Za-z0-9_-]{1,64}$/;
/** Each unit of a rate: its name in the WIT's `rate-unit`, and its length in seconds. */
const UNITS = { s: ["second", 1], m: ["minute", 60], h: ["hour", 3_600] };

/**
 * A queue's `concurrency` and `rate` (with `burst`), each undefined when not declared.
 * @returns {{ concurrency: number | undefined, rate: { count: number, unit: string, burst: number } | undefined }}
 */
export function queueLimits(options, problems) {
  const concurrency = options.concurrency === undefined ? undefined : cap(options, "concurrency", problems);
  if (options.rate === undefined && options.burst !== undefined) {
    problems.push('`burst` without a `rate`: write `rate: "10/s"` too');
  }
  const rate = options.rate === undefined ? undefined : rateOf(options, "rate", problems);
  return { concurrency, rate };
}

/**
 * A job type's `concurrency`, `rate` and `unique`, in the shapes of the WIT's
 * `key-concurrency`, `key-rate` and `unique-key` (with `forMs`), each undefined when not
 * declared.
 */
export function jobLimits(options, problems) {
  const concurrency = nested(options, "concurrency", '{ key: "customer_id", limit: 2 }', ["key", "limit"], problems, (spec, local) => ({
    key: key(spec, true, local),
    limit: required(spec, "limit", "how many jobs of one key run at once", "2", local) ? cap(spec, "limit", local) : undefined,
  }));
  const rate = nested(
    options,
    "rate",
    '{ key: "customer_id", limit: "10/s" }',
    ["key", "limit", "burst", "respectRetryAfter"],
    problems,
    (spec, local) => ({
      key: key(spec, false, local),
      rate: required(spec, "limit", "the rate of one key", '"10/s"', local) ? rateOf(spec, "limit", local) : undefined,
      respectRetryAfter: boolean(spec, "respectRetryAfter", false, local),
    }),
  );
  const unique = nested(options, "unique", '{ key: "order_id", for: "10m" }', ["key", "for"], problems, (spec, local) => ({
    key: key(spec, true, local),
    forMs: required(spec, "for", "how long a job holds its key at most", '"10m"', local) ? uniqueFor(spec, local) : undefined,
  }));
  return { concurrency, rate, unique };
}

/** An object-valued option, its problems prefixed with its name as a retry policy's are. */
function nested(options, name, example, accepted, problems, read) {
  const spec = options[name];
  if (spec === undefined) return undefined;
  if (spec === null || typeof spec !== "object" || Array.isArray(spec)) {
    problems.push(`\`${name}\` must be an object such as \`${example}\`, got ${describe(spec)}`);
    return undefined;
  }
  const local = [];
  unknownKeys(spec, accepted, local);
  const value = read(spec, local);
  problems.push(...local.map((problem) => `${name}: ${problem}`));
  return value;
}

function required(spec, name, what, example, problems) {
  if (spec[name] !== undefined) return true;
  problems.push(`needs \`${name}\`, ${what}: add e.g. \`${name}: ${example}\``);
  return false;
}

/** The payload field whose value is the key; a rate may go without one. */
function key(spec, isRequired, problems) {
  if (spec.key === undefined) {
    if (isRequired) required(spec, "key", "the top-level payload field whose value is the key", '"customer_id"', problems);
    return undefined;
  }
  if (typeof spec.key !== "string" || !KEY.test(spec.key)) {
    problems.push(
      `\`key\` ${describe(spec.key)}: it must be 1 to 64 ASCII letters, digits, \`_\` or \`-\`, the name of a top-level payload field`,
    );
  }
  return spec.key;
}

function cap(options, name, problems) {
  return integer(options, name, undefined, 1, MAX_CONCURRENCY, problems);
}

/**
 * `options[name]` as `COUNT/UNIT` (the Rust SDK's `Rate::parse`), with `options.burst`
 * (default the count, at most `MAX_BURST`).
 */
function rateOf(options, name, problems) {
  const text = options[name];
  if (typeof text !== "string") {
    problems.push(`\`${name}\` must be a string such as "50/s", got ${describe(text)}`);
    return undefined;
  }
  const refused = (why) => {
    problems.push(`\`${name}\` ${describe(text)}: ${why}`);
    return undefined;
  };
  const slash = text.indexOf("/");
  if (slash < 0) return refused("write it as COUNT/UNIT, e.g. `10/s`, `10/m` or `10/h`");
  const unit = UNITS[text.slice(slash + 1)];
  if (unit === undefined) return refused("the unit must be `s`, `m` or `h`");
  const digits = text.slice(0, slash);
  const count = /^[0-9]+$/.test(digits) ? Number(digits) : 0;
  if (count < 1 || count > MAX_RATE_COUNT) return refused(`the count must be 1 to ${MAX_RATE_COUNT}`);
  const [unitName, seconds] = unit;
  if (count > MAX_PER_SECOND * seconds) return refused(`at most ${MAX_PER_SECOND} jobs a second`);
  const burst = options.burst === undefined ? Math.min(count, MAX_BURST) : integer(options, "burst", undefined, 1, MAX_BURST, problems);
  return { count, unit: unitName, burst };
}

/** How long a unique job holds its key: no longer than a job can be held. */
function uniqueFor(spec, problems) {
  const ms = duration(spec, "for", problems);
  if (ms !== undefined && ms > MAX_DELAY_MS) {
    problems.push(
      `\`for\` of ${formatMs(ms)} is longer than a job can be held, ${formatMs(MAX_DELAY_MS)} (about 24.8 days, \`MAX_DELAY_MS\`)`,
    );
  }
  return ms;
}
