// The duration grammar of jobhost (the Rust SDK's `parse_duration`, docs/plugin-authors.md
// "The grammar"): an integer, optional whitespace and an optional unit ms, s, m, h or d;
// a bare integer means seconds; zero is refused. Kept identical so that a policy reads the
// same in Rust attributes, JavaScript declarations and `jobhost` command lines.

/** The longest wait a broker hold queue can hold a job: 2^31 - 1 ms, about 24.8 days. */
export const MAX_DELAY_MS = 2 ** 31 - 1;

const UNITS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

const FORM =
  "write an integer and an optional unit ms, s, m, h or d, e.g. `500ms`, `30s` or `2 m` " +
  "(a bare integer means seconds)";

/**
 * Parse `text` as a duration in milliseconds.
 * @param {string} text
 * @returns {number}
 * @throws {TypeError} naming the input and the grammar
 */
export function parseDuration(text) {
  if (typeof text !== "string") {
    throw new TypeError(`a duration is a string such as "30s", got ${describe(text)}: ${FORM}`);
  }
  const trimmed = text.trim();
  if (trimmed === "") {
    throw new TypeError(`empty duration: ${FORM}`);
  }
  const match = /^([0-9]+)\s*([A-Za-z]*)$/.exec(trimmed);
  if (match === null) {
    throw new TypeError(`malformed duration \`${text}\`: ${FORM}`);
  }
  const [, digits, unit] = match;
  const unitMs = unit === "" ? 1_000 : UNITS[unit];
  if (unitMs === undefined) {
    throw new TypeError(`unknown unit \`${unit}\` in duration \`${text}\`: use ms, s, m, h or d`);
  }
  const count = BigInt(digits);
  if (count === 0n) {
    throw new TypeError(`zero duration \`${text}\`: a duration must be positive`);
  }
  const ms = count * BigInt(unitMs);
  if (ms > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new TypeError(
      `duration \`${text}\` overflows: at most ${Number.MAX_SAFE_INTEGER} milliseconds fit`,
    );
  }
  return Number(ms);
}

/** `1500` -> `"1.5s"`, for messages. */
export function formatMs(ms) {
  if (ms < 1_000) return `${ms}ms`;
  return `${ms / 1_000}s`;
}

/** A value as an error message quotes it. */
export function describe(value) {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  if (value === null || typeof value !== "object") return String(value);
  try {
    return JSON.stringify(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
