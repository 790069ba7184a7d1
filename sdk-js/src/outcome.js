// What a response means for the job (`Response.jobResult`), ported from the Rust SDK's
// sdk/src/http/outcome.rs, table and reasons alike, so that a dead letter reads the same
// whichever SDK wrote the plugin:
//
// | response                                   | jobResult()                                  |
// |--------------------------------------------|----------------------------------------------|
// | 2xx                                        | returns                                      |
// | 429 or 503 with a usable `Retry-After`     | throws `retryAfter(wait)`, at most MAX_DELAY_MS (the reason says it was capped) |
// | 429 or 503 without one, any other 5xx      | throws `retryable`                           |
// | any other 4xx                              | throws `fatal`                               |
// | 3xx (a redirect not followed), 1xx         | throws `fatal`, naming where it leads        |
//
// Reasons name the request without its query or user information, the status, and quote
// at most 512 bytes of the body, one line. Pure: a status, headers, a body and the time.

import { MAX_DELAY_MS, formatMs } from "./duration.js";
import { fatal, retryAfter, retryable } from "./errors.js";
import { bounded, utf8 } from "./text.js";

/** The most of a body a reason quotes, in bytes (before escapes and the closing note). */
export const EXCERPT_BYTES = 512;

/** The largest wait a `Retry-After` can name: u64::MAX seconds, where Rust saturates. */
const U64_MAX = 18_446_744_073_709_551_615n;

/**
 * What a response means for the job at `nowMs` (the clock an HTTP-date `Retry-After` is
 * counted from): undefined for 2xx, else the `JobError` to throw.
 * @param {{ status: number, header(name: string): string | undefined, body: Uint8Array }} response
 * @param {string} label the request, `GET http://host/path`
 */
export function outcomeOf(response, label, nowMs) {
  const { status } = response;
  const answered = `${label} answered ${statusLine(status)}`;
  if (status >= 200 && status <= 299) return undefined;
  if (status === 429 || status === 503) {
    const header = response.header("retry-after");
    const asked = header === undefined ? undefined : parseRetryAfterMs(header, nowMs);
    if (asked !== undefined) return deferral(asked, answered);
    return retryable(withBody(`${answered} without a usable Retry-After`, response.body));
  }
  if (status >= 500 && status <= 599) return retryable(withBody(answered, response.body));
  if (status >= 400 && status <= 499) return fatal(withBody(answered, response.body));
  if (status >= 300 && status <= 399) {
    const location = bounded(utf8(response.header("location") ?? ""), 256);
    return fatal(
      `${answered}, a redirect to \`${location}\` the request does not follow (see \`followRedirects\`)`,
    );
  }
  return fatal(withBody(`${answered}, which is no final HTTP status`, response.body));
}

/**
 * The wait a `Retry-After` value asks for at `nowMs`, in milliseconds as a BigInt:
 * delta-seconds (beyond u64 seconds saturated, as in Rust), or an HTTP date (a past date
 * is no wait). Undefined when it is neither.
 * @returns {bigint | undefined}
 */
export function parseRetryAfterMs(value, nowMs) {
  const trimmed = value.trim();
  if (/^[0-9]+$/.test(trimmed)) {
    const seconds = BigInt(trimmed);
    return (seconds > U64_MAX ? U64_MAX : seconds) * 1000n;
  }
  const dateMs = parseHttpDate(trimmed);
  if (dateMs === undefined) return undefined;
  return dateMs <= nowMs ? 0n : BigInt(Math.ceil(dateMs - nowMs));
}

/**
 * The wait a `Retry-After` value asks for at `nowMs`, in milliseconds (possibly beyond
 * `MAX_DELAY_MS`, and beyond a safe integer); undefined when it is unusable.
 */
export function parseRetryAfter(value, nowMs = Date.now()) {
  const ms = parseRetryAfterMs(value, nowMs);
  return ms === undefined ? undefined : Number(ms);
}

/** The deferral a server asked for (`askedMs`, a BigInt), capped at the longest hold. */
function deferral(askedMs, answered) {
  if (askedMs > BigInt(MAX_DELAY_MS)) {
    return retryAfter(
      MAX_DELAY_MS,
      `${answered}, Retry-After ${askedMs / 1000n}s, capped at the longest hold of ${formatMs(MAX_DELAY_MS)}`,
    );
  }
  const ms = Number(askedMs);
  // Rust's `Duration` debug form, which the Rust SDK's reason shows: `7s`, `1.5s`, `0ns`.
  return retryAfter(ms, `${answered}, Retry-After ${ms === 0 ? "0ns" : formatMs(ms)}`);
}

/** `reason`, then `: ` and an excerpt of `body` when it has one. */
function withBody(reason, body) {
  const shown = excerpt(body);
  return shown === "" ? reason : `${reason}: ${shown}`;
}

/**
 * At most `EXCERPT_BYTES` of `body`, trimmed of ASCII whitespace, read lossily as UTF-8,
 * escaped, and saying how long the whole was when it is cut.
 * @param {Uint8Array} body
 */
export function excerpt(body) {
  const trimmed = trimAscii(body);
  const shown = bounded(trimmed, EXCERPT_BYTES);
  return trimmed.length > EXCERPT_BYTES ? `${shown} (${body.length} bytes in all)` : shown;
}

/** Rust's `<[u8]>::trim_ascii`: space, tab, LF, FF and CR off both ends. */
function trimAscii(bytes) {
  const space = (b) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0c || b === 0x0d;
  let start = 0;
  let end = bytes.length;
  while (start < end && space(bytes[start])) start += 1;
  while (end > start && space(bytes[end - 1])) end -= 1;
  return bytes.subarray(start, end);
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const LONG_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/**
 * An HTTP date (RFC 9110 5.6.7) as milliseconds since the epoch, in its three forms as the
 * Rust SDK's `httpdate` reads them: `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate),
 * `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850) and `Sun Nov  6 08:49:37 1994` (asctime).
 * Undefined for anything else, including a weekday that does not match the date.
 */
export function parseHttpDate(text) {
  let m = /^([A-Za-z]{3}), (\d{2}) ([A-Za-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(text);
  if (m) return date(DAYS.indexOf(m[1]), +m[4], m[3], +m[2], +m[5], +m[6], +m[7]);
  m = /^([A-Za-z]+), (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/.exec(text);
  if (m) {
    // RFC 850's two-digit year: 70..99 are 19xx, the rest 20xx (httpdate's reading).
    const year = +m[4] < 70 ? 2000 + +m[4] : 1900 + +m[4];
    return date(LONG_DAYS.indexOf(m[1]), year, m[3], +m[2], +m[5], +m[6], +m[7]);
  }
  m = /^([A-Za-z]{3}) ([A-Za-z]{3}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/.exec(text);
  if (m) return date(DAYS.indexOf(m[1]), +m[7], m[2], +m[3].trim(), +m[4], +m[5], +m[6]);
  return undefined;
}

function date(weekday, year, monthName, day, hour, minute, second) {
  const month = MONTHS.indexOf(monthName);
  if (weekday < 0 || month < 0 || year < 1970 || year > 9999) return undefined;
  if (hour > 23 || minute > 59 || second > 60 || day < 1) return undefined;
  const ms = Date.UTC(year, month, day, hour, minute, Math.min(second, 59));
  const parsed = new Date(ms);
  if (parsed.getUTCDate() !== day || parsed.getUTCDay() !== weekday) return undefined;
  return ms;
}

/** `429 Too Many Requests`: the status and its reason phrase, when it has a common one. */
function statusLine(status) {
  const phrase = PHRASES[status];
  return phrase === undefined ? String(status) : `${status} ${phrase}`;
}

const PHRASES = {
  300: "Multiple Choices",
  301: "Moved Permanently",
  302: "Found",
  303: "See Other",
  304: "Not Modified",
  307: "Temporary Redirect",
  308: "Permanent Redirect",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  410: "Gone",
  413: "Content Too Large",
  415: "Unsupported Media Type",
  422: "Unprocessable Content",
  429: "Too Many Requests",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};
