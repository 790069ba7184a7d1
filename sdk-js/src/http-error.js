// `HttpError`: a request that got no response (the Rust SDK's `HttpError` and its
// `HttpErrorKind`). A handler that lets one escape fails the job by its kind: retryable
// when trying again may succeed, fatal when a retry repeats it (see `outcomeOf`).

import { JobError } from "./errors.js";

/**
 * Every kind, and whether trying again may succeed:
 * - `denied`: the operator has not granted the origin, or the host refused the request;
 * - `timeout`: no connection or no answer in time;
 * - `connection`: refused, DNS, TLS, protocol, or lost midway;
 * - `tooLarge`: a response larger than the operator allows (`max_response_bytes`);
 * - `invalid`: the request cannot be sent as written (URL, method, header, size);
 * - `other`: the host failed otherwise.
 */
export const HTTP_ERROR_KINDS = Object.freeze({
  denied: false,
  timeout: true,
  connection: true,
  tooLarge: false,
  invalid: false,
  other: true,
});

/** A request that got no response; `kind` is one of `HTTP_ERROR_KINDS`. */
export class HttpError extends Error {
  /**
   * @param {"denied" | "timeout" | "connection" | "tooLarge" | "invalid" | "other"} kind
   * @param {string} message
   */
  constructor(kind, message) {
    if (!(kind in HTTP_ERROR_KINDS)) {
      throw new TypeError(`an HttpError's kind is one of ${Object.keys(HTTP_ERROR_KINDS).join(", ")}, got ${String(kind)}`);
    }
    super(message);
    this.name = "HttpError";
    this.kind = kind;
  }

  /** Whether trying again may succeed: timeouts, failed connections and other host failures. */
  get retryable() {
    return HTTP_ERROR_KINDS[this.kind];
  }

  /** What it means for the job: retryable or fatal by its kind, with its message as the reason. */
  toJobError() {
    return new JobError(this.retryable ? "retryable" : "fatal", this.message);
  }
}
