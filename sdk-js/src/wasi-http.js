// One request through the host's `wasi:http/outgoing-handler`, imported directly (the world
// `plugin-js` of sdk-js/wit/js.wit), ported from the Rust SDK's sdk/src/http/wasi.rs and
// the error mapping of its error.rs. Component-only: guest.js passes it the imports.
//
// Not StarlingMonkey's `fetch`, which was tried first: it rejects every request that got
// no response with one `TypeError` ("NetworkError when attempting to fetch resource."),
// so a request the operator has not granted (fatal in Rust, with the host's message naming
// the grant) read as a retryable connection failure, the host's `request_timeout` read
// alike, and reading a 20 MB body failed on the host's budget of 1,024 resources held at
// once rather than on `max_response_bytes`. Here each `error-code` maps as in Rust, the
// body is read in 64 KiB chunks (the host cuts it at `max_response_bytes`, 10 MiB by
// default, which is the bound on what a hostile server can make a job hold), and that cut
// is recognised by its message. Resources are dropped as soon as they are done with, so
// that a job may send many requests (1,500 in one job, in a test) within that budget.
//
// The calls block the job (a job is one call, and the host's timeouts bound each wait).
// The request is handed to the host before its body is written, because the host streams
// the body to the server, and a body larger than the pipe between them would otherwise
// never finish writing.

import { HttpError } from "./http-error.js";
import { Response } from "./http.js";
import { bounded, utf8 } from "./text.js";
import { split } from "./url.js";

/** The most a `blocking-write-and-flush` takes at once (the WASI contract). */
const WRITE_CHUNK = 4096;
/** How much one read asks for. */
const READ_CHUNK = 64n * 1024n;
/** The most of a host's message an error keeps. */
const MESSAGE_BYTES = 1024;
/** The start of the host's message for a request to an origin the operator has not granted. */
const NOT_GRANTED = "outbound request to `";
/** The start of the host's message for a body cut at `max_response_bytes` (`: N bytes` follows). */
const BODY_TOO_LARGE = "HTTP response body size exceeds limit";

/** Methods whose requests carry a body, and so a `content-length` even when it is empty. */
const CARRIES_BODY = ["POST", "PUT", "PATCH"];

/**
 * A backend `send` over the `wasi:http` imports.
 * @param {{ handle: Function, Fields: any, OutgoingRequest: any, OutgoingBody: any,
 *   IncomingBody: any, RequestOptions: any, httpErrorCode: Function }} wasi
 */
export function wasiSender(wasi) {
  return async (request) => send(wasi, request);
}

function send(wasi, request) {
  const label = request.label;
  const target = split(request.url);
  if (target.error !== undefined) {
    throw new HttpError("invalid", `${label} cannot be sent: ${target.error}`);
  }
  let fields;
  try {
    fields = wasi.Fields.fromList(wireHeaders(request));
  } catch (error) {
    const why = error?.payload?.tag === "forbidden" ? "is one the host sets itself" : "is malformed";
    const names = request.headers.map(([name]) => name).join(", ");
    throw new HttpError("invalid", `${label} cannot be sent: one of its headers (${names}) ${why}`);
  }
  const outgoing = new wasi.OutgoingRequest(fields);
  try {
    outgoing.setMethod({ tag: request.method.toLowerCase() });
    outgoing.setScheme({ tag: target.https ? "HTTPS" : "HTTP" });
    outgoing.setAuthority(target.authority);
    outgoing.setPathWithQuery(target.pathAndQuery);
  } catch {
    throw new HttpError("invalid", `${label} cannot be sent: the host refused its URL or method`);
  }
  const body = outgoing.body();
  let future;
  try {
    future = wasi.handle(outgoing, options(wasi, request));
  } catch (error) {
    throw fromCode(error?.payload, label);
  }
  writeBody(wasi, body, request.body, label);
  try {
    wasi.OutgoingBody.finish(body, undefined);
  } catch (error) {
    throw fromCode(error?.payload, label);
  }

  const ready = future.subscribe();
  ready.block();
  drop(ready);
  const got = future.get();
  drop(future);
  // `block` returned, so the response is there, and it is taken only here.
  if (got === undefined || got.tag !== "ok") {
    throw new HttpError("other", `${label} failed in the host: the response was not ready or was taken`);
  }
  if (got.val.tag === "err") throw fromCode(got.val.val, label);
  const incoming = got.val.val;
  const status = incoming.status();
  const headerFields = incoming.headers();
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  const headers = headerFields.entries().map(([name, value]) => [name, decoder.decode(value)]);
  drop(headerFields);
  const incomingBody = incoming.consume();
  const bytes = readBody(wasi, incomingBody, label);
  // The trailers are not read: their future is dropped at once.
  drop(wasi.IncomingBody.finish(incomingBody));
  drop(incoming);
  return new Response(status, { headers, body: bytes });
}

/**
 * The headers as they go on the wire: the request's, with the body's length as
 * `content-length` (in place of one the request set) when it has a body or a method that
 * carries one. Without it `wasi:http` sends the body chunked, which servers that require
 * a length (presigned uploads, many API gateways) refuse.
 */
function wireHeaders(request) {
  const headers = request.headers
    .filter(([name]) => name.toLowerCase() !== "content-length")
    .map(([name, value]) => [name, utf8(value)]);
  if (CARRIES_BODY.includes(request.method) || request.body.length > 0) {
    headers.push(["content-length", utf8(String(request.body.length))]);
  }
  return headers;
}

/** The request's timeout as `wasi:http` options; without one the host's `request_timeout` holds. */
function options(wasi, request) {
  if (request.timeoutMs === undefined) return undefined;
  const nanos = BigInt(request.timeoutMs) * 1_000_000n;
  const options = new wasi.RequestOptions();
  for (const set of ["setConnectTimeout", "setFirstByteTimeout", "setBetweenBytesTimeout"]) {
    try {
      options[set](nanos);
    } catch {
      // A host that does not take this timeout keeps its own, which bounds the request anyway.
    }
  }
  return options;
}

function writeBody(wasi, body, bytes, label) {
  if (bytes.length === 0) return;
  const stream = body.write();
  try {
    for (let at = 0; at < bytes.length; at += WRITE_CHUNK) {
      stream.blockingWriteAndFlush(bytes.subarray(at, at + WRITE_CHUNK));
    }
  } catch (error) {
    throw fromCode(streamError(wasi, error?.payload), label);
  } finally {
    drop(stream);
  }
}

function readBody(wasi, body, label) {
  const stream = body.stream();
  const chunks = [];
  let length = 0;
  try {
    for (;;) {
      let chunk;
      try {
        chunk = stream.blockingRead(READ_CHUNK);
      } catch (error) {
        if (error?.payload?.tag === "closed") break;
        throw fromCode(streamError(wasi, error?.payload), label);
      }
      chunks.push(chunk);
      length += chunk.length;
    }
  } finally {
    drop(stream);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return bytes;
}

/** The `error-code` behind a failed stream operation (`stream-error`). */
function streamError(wasi, failed) {
  if (failed?.tag !== "last-operation-failed") return { tag: "connection-terminated" };
  const ioError = failed.val;
  let code;
  try {
    code = wasi.httpErrorCode(ioError);
  } catch {
    code = undefined;
  }
  if (code !== undefined) return code;
  // A body stream's error reaches the guest without an `error-code`; its message is all
  // that tells a body cut at `max_response_bytes` from a broken connection.
  const message = String(ioError?.toDebugString?.() ?? "");
  const firstLine = message.split("\n")[0];
  if (firstLine.startsWith(BODY_TOO_LARGE)) {
    const limit = /^: (\d+) bytes$/.exec(firstLine.slice(BODY_TOO_LARGE.length))?.[1];
    return { tag: "HTTP-response-body-size", val: limit === undefined ? undefined : BigInt(limit) };
  }
  return { tag: "internal-error", val: message };
}

/**
 * The `HttpError` for the `wasi:http` `error-code` a request failed with (the Rust SDK's
 * `HttpError::from_code`, with the same messages).
 */
export function fromCode(code, label) {
  const tag = String(code?.tag ?? "internal-error").toLowerCase();
  const val = code?.val;
  if (tag === "internal-error" && typeof val === "string" && val.startsWith(NOT_GRANTED)) {
    return new HttpError("denied", bounded(utf8(val), MESSAGE_BYTES));
  }
  const [kind, what] = describe(tag, val);
  return new HttpError(kind, `${label} ${what}`);
}

function describe(tag, val) {
  switch (tag) {
    case "http-request-denied":
      return ["denied", "was denied by the host"];
    case "dns-timeout":
      return ["timeout", "timed out resolving the host"];
    case "connection-timeout":
      return ["timeout", "timed out connecting"];
    case "http-response-timeout":
      return ["timeout", "timed out waiting for the response"];
    case "connection-read-timeout":
      return ["timeout", "timed out reading the response"];
    case "connection-write-timeout":
      return ["timeout", "timed out writing the request"];
    case "connection-refused":
      return ["connection", "was refused a connection"];
    case "connection-terminated":
    case "http-response-incomplete":
      return ["connection", "lost its connection midway"];
    case "dns-error":
      return ["connection", `failed to resolve the host (${bounded(utf8(val?.rcode ?? "no answer"), 64)})`];
    case "destination-not-found":
      return ["connection", "found no such host"];
    case "destination-unavailable":
    case "destination-ip-prohibited":
    case "destination-ip-unroutable":
      return ["connection", "could not reach the host"];
    case "connection-limit-reached":
      return ["connection", "found the host's connections used up"];
    case "tls-protocol-error":
    case "tls-certificate-error":
    case "tls-alert-received":
      return ["connection", "failed in TLS"];
    case "http-protocol-error":
    case "http-response-transfer-coding":
    case "http-response-content-coding":
    case "http-upgrade-failed":
      return ["connection", "got a malformed HTTP response"];
    case "http-response-body-size":
      return [
        "tooLarge",
        `got a response body larger than the operator allows${val === undefined ? "" : ` (${val} bytes)`}: ` +
          "`max_response_bytes` in `jobhost.toml`",
      ];
    case "http-response-header-section-size":
    case "http-response-header-size":
    case "http-response-trailer-section-size":
    case "http-response-trailer-size":
      return ["tooLarge", "got response headers too large"];
    case "http-request-length-required":
    case "http-request-body-size":
    case "http-request-uri-too-long":
    case "http-request-header-section-size":
    case "http-request-header-size":
    case "http-request-trailer-section-size":
    case "http-request-trailer-size":
      return ["invalid", "cannot be sent: it is too large"];
    case "http-request-method-invalid":
    case "http-request-uri-invalid":
      return ["invalid", "cannot be sent: its method or URL is invalid"];
    case "loop-detected":
      return ["other", "ran into a proxy loop"];
    case "configuration-error":
      return ["other", "failed on the host's HTTP configuration"];
    default:
      return ["other", `failed in the host: ${bounded(utf8(typeof val === "string" ? val : "no detail"), MESSAGE_BYTES)}`];
  }
}

/** The key componentize-js's bindings drop a resource by (theirs: `Symbol.dispose`, else this). */
const DISPOSE = Symbol.dispose ?? Symbol.for("dispose");

/**
 * Drop a resource now rather than when it is collected. A child (a stream, a pollable,
 * a headers handle) is dropped before its parent, which `wasi:http` requires.
 */
function drop(resource) {
  resource?.[DISPOSE]?.();
}
