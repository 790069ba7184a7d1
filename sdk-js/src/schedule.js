// A job type's periodic schedule (the Rust SDK's sdk/src/schedule.rs, docs/schedules.md),
// in camelCase: `cron: "0 7 * * *"` with `tz: "Europe/Paris"` (default UTC), or
// `every: "30s"` (at least 1s); `payload`, the value each firing's job carries (default
// `{}`), and `catchUp` (0..=1000, default 0), how many ticks no host fired in time fire
// late. Checked as far as the derive checks; the host checks the cron expression and the
// time zone when it loads the plugin, and refuses it naming what is wrong.

import { duration, integer, utf8Length } from "./checks.js";
import { describe, formatMs } from "./duration.js";

/** The shortest `every`. */
const EVERY_MIN_MS = 1_000;
/** The most missed ticks a schedule may fire late. */
const CATCH_UP_MAX = 1000;
/** The largest payload the host accepts for a schedule's job, in bytes of JSON. */
const PAYLOAD_MAX = 64 * 1024;

/**
 * The schedule a job's options declare, or undefined when they declare none.
 * @returns {{ timing: { kind: "cron", expression: string, tz: string } | { kind: "every", periodMs: number },
 *   payload: string, catchUp: number } | undefined} `payload` as JSON text
 */
export function schedule(options, problems) {
  const { cron, every, tz } = options;
  if (cron === undefined && every === undefined) {
    for (const lone of ["tz", "payload", "catchUp"]) {
      if (options[lone] !== undefined) {
        problems.push(`\`${lone}\` without a schedule: write \`cron: "..."\` or \`every: "..."\` too`);
      }
    }
    return undefined;
  }
  let timing;
  if (cron !== undefined && every !== undefined) {
    problems.push("write one of `cron` and `every`, not both");
  } else if (cron !== undefined) {
    timing = cronTiming(cron, tz, problems);
  } else {
    if (tz !== undefined) problems.push("`tz` applies to `cron` only, not to `every`");
    const periodMs = duration(options, "every", problems);
    if (periodMs !== undefined && periodMs < EVERY_MIN_MS) {
      problems.push(`\`every\` must be at least ${formatMs(EVERY_MIN_MS)}, got ${formatMs(periodMs)}`);
    }
    timing = { kind: "every", periodMs };
  }
  return { timing, payload: payload(options.payload, problems), catchUp: integer(options, "catchUp", 0, 0, CATCH_UP_MAX, problems) };
}

function cronTiming(expression, tz = "", problems) {
  if (typeof expression !== "string") {
    problems.push(`\`cron\` must be a string such as "0 7 * * *", got ${describe(expression)}`);
  } else {
    const fields = expression.split(/\s+/).filter((field) => field !== "").length;
    if (fields < 5 || fields > 6) {
      problems.push(
        `\`cron\` ${describe(expression)} has ${fields} fields: write five (minute hour day-of-month month day-of-week) or six (seconds first)`,
      );
    }
  }
  if (typeof tz !== "string") {
    problems.push(`\`tz\` must be an IANA time zone name such as "Europe/Paris", got ${describe(tz)}`);
  }
  return { kind: "cron", expression, tz };
}

/** The payload as JSON text, as `ctx.enqueue` writes a follow-up's. */
function payload(value, problems) {
  if (value === undefined) return "{}";
  let text;
  try {
    text = JSON.stringify(value);
  } catch {
    // A BigInt or a cycle, which JSON cannot write: refused below.
  }
  if (text === undefined) {
    problems.push(`\`payload\` must be a JSON value such as \`{ kind: "daily" }\`, got ${describe(value)}`);
  } else if (utf8Length(text) > PAYLOAD_MAX) {
    problems.push(`\`payload\` is ${utf8Length(text)} bytes of JSON; a schedule's payload may have at most ${PAYLOAD_MAX}`);
  }
  return text;
}
