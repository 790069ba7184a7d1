// Outbound HTTP from a handler, to the origins the operator granted the plugin (the Rust
// SDK's `jobhost_sdk::http`, in JavaScript's idiom):
//
//   import { config, http } from "@jobhost/sdk";
//   const response = await http.get(`${config.require("api_base")}/orders/7`, {
//     headers: { accept: "application/json" },
//   });                    // no response at all: an HttpError, retryable or fatal by kind
//   response.jobResult();  // 429 defers, 5xx retries, 4xx is fatal (outcome.js has the table)
//   const order = response.json();
//
// Contract:
// - `http.get/post/put/patch/delete(url, options)` and `http.request(method, url, options)`
//   resolve to a `Response` of any status once its whole body is read; they reject with an
//   `HttpError` when there is no response. A handler that lets the error escape fails the
//   job by its kind, as `?` does in Rust.
// - options: `headers` (an object or a list of pairs; a name may repeat in a list), `body`
//   (a string, Uint8Array or ArrayBuffer) or `json` (any JSON value, sent with
//   `content-type: application/json`), `timeout` (milliseconds or a duration string: the
//   longest wait for the response, which the operator's `request_timeout` bounds anyway),
//   `followRedirects` (how many to follow, default 0).
// - Redirects are followed only when asked, each as a request of its own (which the host
//   checks against the grants again), by the Rust SDK's rules: 303, and 301 or 302 after a
//   POST, continue as a body-less GET; to another origin only `CROSS_ORIGIN_HEADERS` go
//   along, and a 307 or 308 that would carry a body there is not followed (the redirect is
//   the response).
// - In the component a request goes through the host's `wasi:http` (guest.js); under
//   `node --test` to the TestContext's responder (testing.js); there is no network in a
//   native test.

import { backend } from "./backend.js";
import { parseDuration } from "./duration.js";
import { HttpError } from "./http-error.js";
import { excerpt, outcomeOf } from "./outcome.js";
import { origin, redacted, resolve } from "./url.js";
import { utf8 } from "./text.js";

/** The headers a followed redirect carries to another origin (names compare ignoring case). */
export const CROSS_ORIGIN_HEADERS = Object.freeze(["accept", "accept-language", "user-agent"]);

const METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"];
const OPTIONS = ["headers", "body", "json", "timeout", "followRedirects"];

/** The request a response answers, for its reasons (`GET http://host/path`). */
const LABEL = Symbol("label");

/** What a request and a response share: their headers and body, and how to read them. */
class Message {
  /** The value of its first header `name` (case-insensitive). */
  header(name) {
    return find(this.headers, name);
  }

  /** Its body as UTF-8 text; throws a TypeError when it is not. */
  text() {
    return new TextDecoder("utf-8", { fatal: true }).decode(this.body);
  }

  /** Its body parsed as JSON. */
  json() {
    return JSON.parse(this.text());
  }
}

/** A request as sent: what a test's responder sees and `run.requests` records. */
export class Request extends Message {
  /**
   * @param {string} method
   * @param {string} url
   * @param {{ headers?: [string, string][], body?: Uint8Array, timeoutMs?: number }} [parts]
   */
  constructor(method, url, { headers = [], body = new Uint8Array(), timeoutMs } = {}) {
    super();
    this.method = method;
    this.url = url;
    /** @type {[string, string][]} every header, in order */
    this.headers = headers;
    /** @type {Uint8Array} */
    this.body = body;
    /** @type {number | undefined} */
    this.timeoutMs = timeoutMs;
  }

  /** `GET http://host/path`: without query, fragment or user information, bounded. */
  get label() {
    return `${this.method} ${redacted(this.url)}`;
  }
}

/** A response: its status, headers and whole body. */
export class Response extends Message {
  /**
   * A response with `status`, as a test's responder answers.
   * @param {number} status
   * @param {{ headers?: Record<string, string> | [string, string][],
   *   body?: string | Uint8Array | ArrayBuffer, json?: unknown }} [parts]
   */
  constructor(status, { headers = [], body, json } = {}) {
    if (!Number.isInteger(status) || status < 100 || status > 999) {
      throw new TypeError(`a status is an integer from 100 to 999, got ${String(status)}`);
    }
    super();
    this.status = status;
    /** @type {[string, string][]} every header, in order */
    this.headers = headerList(headers);
    /** @type {Uint8Array} */
    this.body = json === undefined ? bytes(body) : utf8(JSON.stringify(json));
    this[LABEL] = "";
  }

  /**
   * What this response means for the job: returns for 2xx, else throws the deferral,
   * retryable or fatal `JobError` it calls for (the table in outcome.js).
   */
  jobResult() {
    const error = outcomeOf(this, this[LABEL], Date.now());
    if (error !== undefined) throw error;
  }
}

/** A `GET` of `url`. */
export const get = (url, options) => request("GET", url, options);
/** A `HEAD` of `url`. */
export const head = (url, options) => request("HEAD", url, options);
/** A `POST` to `url`. */
export const post = (url, options) => request("POST", url, options);
/** A `PUT` to `url`. */
export const put = (url, options) => request("PUT", url, options);
/** A `PATCH` to `url`. */
export const patch = (url, options) => request("PATCH", url, options);
/** A `DELETE` of `url`. */
const del = (url, options) => request("DELETE", url, options);
export { del as delete };

/**
 * Send a request with `method` to `url` and read its whole response.
 * @returns {Promise<Response>} a response of any status
 * @throws {HttpError} when there is no response
 */
export async function request(method, url, options = {}) {
  let current = build(method, url, options);
  const redirects = options.followRedirects ?? 0;
  if (!Number.isSafeInteger(redirects) || redirects < 0) {
    throw new HttpError("invalid", `${current.label}: \`followRedirects\` is a whole number, got ${String(redirects)}`);
  }
  for (let followed = 0; ; followed += 1) {
    const response = await backend().send(current);
    response[LABEL] = current.label;
    if (followed === redirects) return response;
    const next = redirected(current, response);
    if (next === undefined) return response;
    current = next;
  }
}

/** The request `method url options` describes, or the `invalid` HttpError saying why not. */
function build(method, url, options) {
  if (typeof url !== "string") {
    throw new HttpError("invalid", `a request's URL is a string, got ${typeof url}`);
  }
  const upper = String(method).toUpperCase();
  const label = `${upper} ${redacted(url)}`;
  if (!METHODS.includes(upper)) {
    throw new HttpError("invalid", `${label} cannot be sent: its method is none of ${METHODS.join(", ")}`);
  }
  const unknown = Object.keys(options).filter((key) => !OPTIONS.includes(key));
  if (unknown.length > 0) {
    throw new HttpError("invalid", `${label}: unknown option ${unknown.map((k) => `\`${k}\``).join(", ")} (known: ${OPTIONS.join(", ")})`);
  }
  let headers;
  let body;
  try {
    headers = headerList(options.headers ?? []);
    body = bytes(options.body);
  } catch (error) {
    throw new HttpError("invalid", `${label}: ${error.message}`);
  }
  if (options.json !== undefined) {
    if (options.body !== undefined) {
      throw new HttpError("invalid", `${label}: give \`body\` or \`json\`, not both`);
    }
    let json;
    try {
      json = JSON.stringify(options.json);
    } catch (error) {
      json = error;
    }
    if (typeof json !== "string") {
      const why = json instanceof Error ? json.message : "it is no JSON value";
      throw new HttpError("invalid", `the JSON body of ${label} does not encode: ${why}`);
    }
    headers.push(["content-type", "application/json"]);
    body = utf8(json);
  }
  let timeoutMs;
  if (options.timeout !== undefined) {
    try {
      timeoutMs = typeof options.timeout === "number" ? checkedMs(options.timeout) : parseDuration(options.timeout);
    } catch (error) {
      throw new HttpError("invalid", `${label}: \`timeout\`: ${error.message}`);
    }
  }
  return new Request(upper, url, { headers, body, timeoutMs });
}

function checkedMs(ms) {
  if (!Number.isSafeInteger(ms) || ms <= 0) {
    throw new TypeError(`a timeout is a positive whole number of milliseconds or a duration string, got ${ms}`);
  }
  return ms;
}

/** The request `response` redirects `request` to, if it is a redirect with a `Location` to follow. */
function redirected(request, response) {
  const { status } = response;
  if (![301, 302, 303, 307, 308].includes(status)) return undefined;
  const location = response.header("location");
  if (location === undefined) return undefined;
  const url = resolve(request.url, location);
  if (url === undefined) {
    throw new HttpError(
      "invalid",
      `${request.label} redirected to \`${excerpt(utf8(location))}\`, which is no http(s) URL`,
    );
  }
  const asGet = status === 303 || ([301, 302].includes(status) && request.method === "POST");
  const sameOrigin = origin(url) === origin(request.url);
  // A body goes to the origin it was written for, never on to another one.
  if (!sameOrigin && !asGet && request.body.length > 0) return undefined;
  const is = (name, names) => names.includes(name.toLowerCase());
  const headers = request.headers.filter(([name]) => {
    const aboutBody = is(name, ["content-type", "content-length"]);
    const kept = sameOrigin || is(name, CROSS_ORIGIN_HEADERS);
    return kept && !(aboutBody && asGet);
  });
  return new Request(asGet && request.method !== "HEAD" ? "GET" : request.method, url, {
    headers,
    body: asGet ? new Uint8Array() : request.body,
    timeoutMs: request.timeoutMs,
  });
}

function find(headers, name) {
  const lower = name.toLowerCase();
  return headers.find(([key]) => key.toLowerCase() === lower)?.[1];
}

/** Headers as a list of `[name, value]` string pairs, from an object or such a list. */
function headerList(headers) {
  const entries = Array.isArray(headers) ? headers : Object.entries(headers ?? {});
  return entries.map((entry) => {
    if (!Array.isArray(entry) || entry.length !== 2) {
      throw new TypeError("headers are an object or a list of [name, value] pairs");
    }
    return [String(entry[0]), String(entry[1])];
  });
}

/** A body as bytes: a string as UTF-8, a Uint8Array or ArrayBuffer as it is, none as empty. */
function bytes(body) {
  if (body === undefined || body === null) return new Uint8Array();
  if (typeof body === "string") return utf8(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError(`a body is a string, a Uint8Array or an ArrayBuffer, got ${typeof body}`);
}
