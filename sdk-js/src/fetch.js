// One request through a WHATWG `fetch`: in the component, StarlingMonkey's, which sends it
// through the host's `wasi:http/outgoing-handler` (componentize-js's `http` feature). The
// SDK follows redirects itself (http.js), so `fetch` is asked to follow none.
//
// What `fetch` does not say: StarlingMonkey rejects every request that got no response
// with the same `TypeError` ("NetworkError when attempting to fetch resource."), without
// the `wasi:http` error code, so a refused connection, a failed DNS lookup and a request
// to an origin the operator has not granted all read alike. They are `connection` errors
// here (retryable), and the message says what the host logs name: the host's own log line
// for the request tells a denial apart (it names the grant to add).

import { HttpError } from "./http-error.js";
import { Response } from "./http.js";
import { split } from "./url.js";

/** Methods whose requests carry a body, and so a `content-length` even when it is empty. */
const CARRIES_BODY = ["POST", "PUT", "PATCH"];

/**
 * A backend `send` over `fetchImpl`.
 * @param {typeof fetch} fetchImpl
 * @returns {(request: import("./http.js").Request) => Promise<Response>}
 */
export function fetchSender(fetchImpl) {
  return async (request) => {
    const label = request.label;
    const target = split(request.url);
    if (target.error !== undefined) {
      throw new HttpError("invalid", `${label} cannot be sent: ${target.error}`);
    }
    const headers = request.headers.filter(([name]) => name.toLowerCase() !== "content-length");
    const sendsBody = request.body.length > 0 || CARRIES_BODY.includes(request.method);
    const controller = new AbortController();
    let timedOut = false;
    const timer =
      request.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            controller.abort();
          }, request.timeoutMs);
    try {
      let answer;
      try {
        answer = await fetchImpl(request.url, {
          method: request.method,
          headers,
          // A body of known length goes with its `content-length`, not chunked, which
          // servers that require a length (presigned uploads, many gateways) refuse.
          body: sendsBody ? request.body : undefined,
          redirect: "manual",
          signal: controller.signal,
        });
      } catch (error) {
        throw failure(error, label, timedOut, "waiting for the response");
      }
      let body;
      try {
        body = new Uint8Array(await answer.arrayBuffer());
      } catch (error) {
        throw failure(error, label, timedOut, "reading the response");
      }
      return new Response(answer.status, { headers: [...answer.headers], body });
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  };
}

/** The `HttpError` behind a rejected `fetch` or body read. */
function failure(error, label, timedOut, doing) {
  if (error instanceof HttpError) return error;
  if (timedOut) return new HttpError("timeout", `${label} timed out ${doing}`);
  const message = error instanceof Error ? error.message : String(error);
  if (/body size exceeds limit/i.test(message)) {
    return new HttpError(
      "tooLarge",
      `${label} got a response body larger than the operator allows: \`max_response_bytes\` in \`jobhost.toml\``,
    );
  }
  return new HttpError(
    "connection",
    `${label} got no response (${message.trim() || "no detail"}): the connection failed, or the ` +
      "operator has not granted the origin (the host's log names the grant to add)",
  );
}
