// The `ctx` a handler gets: the delivery's facts, `log` and `enqueue`. One implementation
// for the component and for `@jobhost/sdk/testing`; only the sink differs (the host's
// imports, or a recorder), so a handler tested natively meets the same checks.

import { MAX_DELAY_MS, describe, formatMs } from "./duration.js";

export const LEVELS = ["trace", "debug", "info", "warn", "error"];

/**
 * @param {{ jobId: string, jobType: string, queue: string, attempt: number, maxAttempts: number,
 *   deferrals: number, priority: number, ageMs: number }} delivery
 * @param {{ log(level: string, message: string, fields: [string, string][]): void,
 *   enqueue(jobType: string, payload: Uint8Array, delayMs: number | undefined): string }} sink
 */
export function createContext(delivery, sink) {
  const log = (level, message, fields = {}) => {
    if (!LEVELS.includes(level)) {
      throw new TypeError(`log level must be one of ${LEVELS.join(", ")}, got ${describe(level)}`);
    }
    sink.log(level, String(message), fieldList(fields));
  };
  return Object.freeze({
    ...delivery,
    /** Whether a retryable failure now dead-letters the job. */
    isLastAttempt: () => delivery.attempt >= delivery.maxAttempts,
    log,
    trace: (message, fields) => log("trace", message, fields),
    debug: (message, fields) => log("debug", message, fields),
    info: (message, fields) => log("info", message, fields),
    warn: (message, fields) => log("warn", message, fields),
    error: (message, fields) => log("error", message, fields),
    /**
     * Enqueue a follow-up job, published only if this handler succeeds; returns its id.
     * @throws {EnqueueError} when the payload is not JSON, the delay is not holdable, or the
     *   host refused the job
     */
    enqueue(jobType, payload, { delayMs } = {}) {
      if (typeof jobType !== "string" || jobType === "") {
        throw new EnqueueError(`a follow-up's job type must be a non-empty string, got ${describe(jobType)}`);
      }
      if (delayMs !== undefined && (!Number.isSafeInteger(delayMs) || delayMs < 0)) {
        throw new EnqueueError(`a follow-up's delay is a whole number of milliseconds, got ${describe(delayMs)}`);
      }
      if (delayMs > MAX_DELAY_MS) {
        throw new EnqueueError(
          `the follow-up's delay of ${formatMs(delayMs)} exceeds the longest hold of ${formatMs(MAX_DELAY_MS)}`,
        );
      }
      const json = JSON.stringify(payload);
      if (json === undefined) {
        throw new EnqueueError(`a follow-up's payload must be JSON, got ${describe(payload)}`);
      }
      return sink.enqueue(jobType, new TextEncoder().encode(json), delayMs);
    },
  });
}

/** A follow-up the SDK or the host refused. */
export class EnqueueError extends Error {
  constructor(message) {
    super(message);
    this.name = "EnqueueError";
  }
}

/** `{ to: "a@b", bytes: 11 }` -> `[["to", "a@b"], ["bytes", "11"]]`; also takes such a list. */
function fieldList(fields) {
  const entries = Array.isArray(fields) ? fields : Object.entries(fields ?? {});
  return entries.map(([key, value]) => [String(key), typeof value === "string" ? value : describeField(value)]);
}

function describeField(value) {
  return value !== null && typeof value === "object" ? describe(value) : String(value);
}
