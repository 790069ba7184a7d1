// src/wasi-http.js against a fake `wasi:http` (the shapes componentize-js gives: resources
// as classes, variants as `{ tag, val }`, an imported `result`'s error thrown with its
// `payload`): what goes on the wire, and what each `error-code` means for the job, with the
// Rust SDK's messages (sdk/src/http/error.rs). End to end it runs in host/tests/cli/cli_js.rs.

import assert from "node:assert/strict";
import { test } from "node:test";

import { HttpError } from "../src/index.js";
import { Request } from "../src/http.js";
import { fromCode, wasiSender } from "../src/wasi-http.js";

const LABEL = "POST http://hooks.test/in";
const encoder = new TextEncoder();
const thrown = (payload) => Object.assign(new Error("wasi error"), { payload });
const DISPOSE = Symbol.dispose ?? Symbol.for("dispose");

/**
 * A fake host answering every request with `answer` ({ status, headers, chunks } or
 * { code } for a request that got no response, or { bodyError } for a body that breaks);
 * `sent` records what reached it.
 */
function fakeWasi(answer) {
  const sent = { writes: [], dropped: [] };
  /** `object` as a resource named `name` that records when it is dropped. */
  const resource = (name, object) => Object.assign(object, { [DISPOSE]: () => sent.dropped.push(name) });
  class Fields {
    static fromList(list) {
      const fields = new Fields();
      fields.list = list;
      return fields;
    }
    entries() {
      return this.list;
    }
  }
  class OutgoingBody {
    write() {
      return resource("output-stream", { blockingWriteAndFlush: (chunk) => sent.writes.push(chunk.slice()) });
    }
    static finish() {
      sent.dropped.push("outgoing-body (finished)");
    }
  }
  class OutgoingRequest {
    constructor(fields) {
      sent.headers = fields.list.map(([n, v]) => [n, new TextDecoder().decode(v)]);
    }
    setMethod(m) { sent.method = m; }
    setScheme(s) { sent.scheme = s; }
    setAuthority(a) { sent.authority = a; }
    setPathWithQuery(p) { sent.path = p; }
    body() { return new OutgoingBody(); }
  }
  class RequestOptions {
    setConnectTimeout(ns) { sent.connect = ns; }
    setFirstByteTimeout(ns) { sent.firstByte = ns; }
    setBetweenBytesTimeout(ns) { sent.betweenBytes = ns; }
  }
  const chunks = [...(answer.chunks ?? [])];
  const incoming = resource("incoming-response", {
    status: () => answer.status,
    headers: () => resource("headers", Fields.fromList((answer.headers ?? []).map(([n, v]) => [n, encoder.encode(v)]))),
    consume: () => ({
      stream: () => resource("input-stream", {
        blockingRead() {
          if (chunks.length > 0) return encoder.encode(chunks.shift());
          if (answer.bodyError !== undefined) {
            throw thrown({ tag: "last-operation-failed", val: { toDebugString: () => answer.bodyError } });
          }
          throw thrown({ tag: "closed" });
        },
      }),
    }),
  });
  const wasi = {
    Fields,
    OutgoingBody,
    OutgoingRequest,
    RequestOptions,
    IncomingBody: { finish: () => (sent.dropped.push("incoming-body (finished)"), resource("future-trailers", {})) },
    httpErrorCode: () => undefined,
    handle(request, options) {
      sent.options = options;
      if (answer.refused !== undefined) throw thrown(answer.refused);
      return resource("future-incoming-response", {
        subscribe: () => resource("pollable", { block() {} }),
        get: () => ({ tag: "ok", val: answer.code ? { tag: "err", val: answer.code } : { tag: "ok", val: incoming } }),
      });
    },
  };
  return { send: wasiSender(wasi), sent };
}

test("a request goes out as written, its body in chunks of at most 4 KiB with its length", async () => {
  const { send, sent } = fakeWasi({ status: 201, headers: [["x-a", "1"], ["x-a", "2"]], chunks: ["hel", "lo"] });
  const body = new Uint8Array(10_000).fill(65);
  const request = new Request("POST", "https://hooks.test:8443/in?k=1#frag", {
    headers: [["X-Signature", "sha256=00"], ["Content-Length", "999"]],
    body,
    timeoutMs: 3_000,
  });
  const response = await send(request);
  assert.deepEqual(sent.method, { tag: "post" });
  assert.deepEqual(sent.scheme, { tag: "HTTPS" });
  assert.equal(sent.authority, "hooks.test:8443");
  assert.equal(sent.path, "/in?k=1", "no fragment");
  assert.deepEqual(sent.headers, [["X-Signature", "sha256=00"], ["content-length", "10000"]], "its own length replaces one the request set");
  assert.deepEqual(sent.writes.map((w) => w.length), [4096, 4096, 1808]);
  assert.equal(sent.connect, 3_000_000_000n);
  assert.equal(sent.firstByte, 3_000_000_000n);
  assert.equal(response.status, 201);
  assert.deepEqual(response.headers, [["x-a", "1"], ["x-a", "2"]], "a repeated header stays repeated");
  assert.equal(response.text(), "hello");
});

test("every resource is dropped once done with, a child before its parent", async () => {
  const { send, sent } = fakeWasi({ status: 200, headers: [["a", "1"]], chunks: ["x"] });
  await send(new Request("PUT", "http://api.test/", { body: new Uint8Array([1]) }));
  assert.deepEqual(sent.dropped, [
    "output-stream",
    "outgoing-body (finished)",
    "pollable",
    "future-incoming-response",
    "headers",
    "input-stream",
    "incoming-body (finished)",
    "future-trailers",
    "incoming-response",
  ]);
});

test("a POST without a body says so, and a GET sends no length and no options", async () => {
  const post = fakeWasi({ status: 200 });
  await post.send(new Request("POST", "http://api.test/ping"));
  assert.deepEqual(post.sent.headers, [["content-length", "0"]]);
  const get = fakeWasi({ status: 200 });
  await get.send(new Request("GET", "http://api.test/"));
  assert.deepEqual(get.sent.headers, []);
  assert.equal(get.sent.options, undefined, "the host's request_timeout holds");
});

test("a request the operator has not granted is fatal with the host's message", async () => {
  const message =
    'outbound request to `http://hooks.test` is not allowed for plugin `webhook`; to allow it add "http://hooks.test" to allowed_outbound_hosts under [plugins.webhook] in the grants file jobhost.toml';
  const { send } = fakeWasi({ refused: { tag: "internal-error", val: message } });
  await assert.rejects(send(new Request("POST", "http://hooks.test/in")), (error) => {
    assert.ok(error instanceof HttpError);
    assert.equal(error.kind, "denied");
    assert.equal(error.retryable, false);
    assert.equal(error.message, message);
    return true;
  });
});

test("timeouts and failed connections are retryable and name the request", () => {
  const cases = [
    [{ tag: "connection-timeout" }, "timeout", "POST http://hooks.test/in timed out connecting"],
    [{ tag: "HTTP-response-timeout" }, "timeout", "POST http://hooks.test/in timed out waiting for the response"],
    [{ tag: "connection-read-timeout" }, "timeout", "POST http://hooks.test/in timed out reading the response"],
    [{ tag: "connection-refused" }, "connection", "POST http://hooks.test/in was refused a connection"],
    [{ tag: "DNS-error", val: { rcode: "NXDOMAIN" } }, "connection", "POST http://hooks.test/in failed to resolve the host (NXDOMAIN)"],
    [{ tag: "TLS-certificate-error" }, "connection", "POST http://hooks.test/in failed in TLS"],
    [{ tag: "internal-error", val: "hyper broke" }, "other", "POST http://hooks.test/in failed in the host: hyper broke"],
    [{ tag: "internal-error" }, "other", "POST http://hooks.test/in failed in the host: no detail"],
  ];
  for (const [code, kind, message] of cases) {
    const error = fromCode(code, LABEL);
    assert.equal(error.kind, kind, code.tag);
    assert.equal(error.retryable, true, code.tag);
    assert.equal(error.message, message);
  }
});

test("a request that cannot be sent, or a response too large, is fatal", () => {
  for (const tag of ["HTTP-request-URI-invalid", "HTTP-request-body-size", "HTTP-request-denied", "HTTP-response-header-size"]) {
    assert.equal(fromCode({ tag }, LABEL).retryable, false, tag);
  }
  assert.equal(
    fromCode({ tag: "HTTP-response-body-size", val: 10_485_760n }, LABEL).message,
    "POST http://hooks.test/in got a response body larger than the operator allows (10485760 bytes): `max_response_bytes` in `jobhost.toml`",
  );
});

test("a body cut at the operator's limit is fatal though its stream error has no code", async () => {
  const { send } = fakeWasi({ status: 200, chunks: ["x"], bodyError: "HTTP response body size exceeds limit: 1048576 bytes" });
  await assert.rejects(send(new Request("GET", "http://big.test/")), {
    name: "HttpError",
    kind: "tooLarge",
    message: "GET http://big.test/ got a response body larger than the operator allows (1048576 bytes): `max_response_bytes` in `jobhost.toml`",
  });
  const broken = fakeWasi({ status: 200, bodyError: "connection reset by peer" });
  await assert.rejects(broken.send(new Request("GET", "http://big.test/")), { kind: "other" });
});

test("a host's message is bounded and one line", () => {
  const error = fromCode({ tag: "internal-error", val: `outbound request to \`${"h".repeat(5000)}\n` }, LABEL);
  assert.ok(error.message.length < 1100, `${error.message.length}`);
  assert.ok(!error.message.includes("\n"));
});

test("a URL that cannot be sent fails before the host sees it", async () => {
  const { send, sent } = fakeWasi({ status: 200 });
  await assert.rejects(send(new Request("GET", "http://me:pw@api.test/")), {
    kind: "invalid",
    message: "GET http://api.test/ cannot be sent: it carries user information, which is not sent: use an `authorization` header",
  });
  assert.equal(sent.method, undefined);
});
