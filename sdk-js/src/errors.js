// How a handler says a job did not complete: it throws a `JobError` (the Rust SDK's
// `JobError` kinds). Anything else it throws is a bug of the moment, treated as retryable
// (see `outcomeOf`), so a job is not lost to a transient `TypeError`.

import { MAX_DELAY_MS, describe, formatMs } from "./duration.js";

/** Why a job did not complete; build it with `retryable`, `fatal`, `deferred` or `retryAfter`. */
export class JobError extends Error {
  /**
   * @param {"retryable" | "fatal" | "deferred"} kind
   * @param {string} message
   * @param {{ delayMs?: number, retryAfter?: boolean }} [deferral]
   */
  constructor(kind, message, deferral = {}) {
    super(message);
    this.name = "JobError";
    this.kind = kind;
    if (kind === "deferred") {
      this.delayMs = deferral.delayMs;
      this.retryAfter = deferral.retryAfter === true;
    }
  }
}

/** Transient: the effective retry policy decides what happens next. */
export function retryable(message) {
  return new JobError("retryable", text(message));
}

/** Permanent: the job is dead-lettered without another attempt. */
export function fatal(message) {
  return new JobError("fatal", text(message));
}

/**
 * Run the job again after `delayMs` without spending an attempt. A delay longer than a
 * hold queue can hold (`MAX_DELAY_MS`) is a fatal error saying so, as in the Rust SDK.
 */
export function deferred(delayMs, reason = "") {
  return deferral(delayMs, reason, false);
}

/**
 * A deferral for as long as a called service asked (an HTTP `Retry-After`): a job type
 * whose key rate respects it holds the key's other jobs back as long.
 */
export function retryAfter(delayMs, reason = "") {
  return deferral(delayMs, reason, true);
}

function deferral(delayMs, reason, isRetryAfter) {
  if (!Number.isSafeInteger(delayMs) || delayMs < 0) {
    return fatal(
      `a deferral needs a whole number of milliseconds, got ${describe(delayMs)} (${text(reason)})`,
    );
  }
  if (delayMs > MAX_DELAY_MS) {
    return fatal(
      `the deferral of ${formatMs(delayMs)} exceeds the longest hold of ${formatMs(MAX_DELAY_MS)} (${text(reason)})`,
    );
  }
  return new JobError("deferred", text(reason), { delayMs, retryAfter: isRetryAfter });
}

/**
 * What a handler's throw means: a `JobError` as it is, an `HttpError` retryable or fatal
 * by its kind (as `?` converts it in Rust), anything else retryable with its message
 * (`uncaught TypeError: ...`).
 * @returns {JobError}
 */
export function outcomeOf(thrown) {
  if (thrown instanceof JobError) return thrown;
  // Duck-typed rather than imported: http-error.js imports this module.
  if (thrown?.name === "HttpError" && typeof thrown.toJobError === "function") return thrown.toJobError();
  if (thrown instanceof Error) return retryable(`uncaught ${thrown.name}: ${thrown.message}`);
  return retryable(`uncaught throw: ${describe(thrown)}`);
}

function text(message) {
  return typeof message === "string" ? message : describe(message);
}
