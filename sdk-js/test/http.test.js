// What a response means for the job (src/outcome.js), Retry-After's two forms, and what
// `http` sends through a TestContext's responder: the cases of the Rust SDK's
// sdk/src/http/outcome/tests.rs and sdk/src/http/tests.rs, with the same reasons.

import assert from "node:assert/strict";
import { test } from "node:test";

import { HttpError, JobError, MAX_DELAY_MS, fatal, http, retryAfter, retryable } from "../src/index.js";
import { excerpt, outcomeOf, parseHttpDate, parseRetryAfter } from "../src/outcome.js";
import { Response, TestContext } from "../src/testing.js";

/** Thu, 03 Dec 2026 12:00:00 GMT: the clock HTTP-date `Retry-After` values are read against. */
const NOW = 1_796_299_200_000;
const LABEL = "GET http://api.test/v1/orders";

/** What `response` means at NOW, as a response to `GET http://api.test/v1/orders?key=s3cr3t`. */
const result = (response) => outcomeOf(response, LABEL, NOW);
const response = (status, parts) => new Response(status, parts);

test("every 2xx is success", () => {
  for (const status of [200, 201, 204, 299]) assert.equal(result(response(status)), undefined, `${status}`);
});

test("a 429 with Retry-After in seconds defers for exactly that long", () => {
  assert.deepEqual(
    result(response(429, { headers: { "Retry-After": "7" } })),
    retryAfter(7_000, "GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After 7s"),
  );
});

test("a 503 with Retry-After as an HTTP date defers until that date", () => {
  const later = result(response(503, { headers: { "retry-after": "Thu, 03 Dec 2026 12:01:30 GMT" } }));
  assert.equal(later.kind, "deferred");
  assert.equal(later.delayMs, 90_000);
  assert.equal(later.retryAfter, true);
  const past = result(response(503, { headers: { "retry-after": "Wed, 02 Dec 2026 12:00:00 GMT" } }));
  assert.equal(past.delayMs, 0, "a date already past asks for no wait");
  assert.equal(past.message, "GET http://api.test/v1/orders answered 503 Service Unavailable, Retry-After 0ns");
});

test("a Retry-After beyond the longest hold is capped and the reason says so", () => {
  for (const [asked, seconds] of [
    ["3000000", "3000000"],
    ["99999999999999999999999", "18446744073709551615"],
  ]) {
    const error = result(response(429, { headers: { "retry-after": asked } }));
    assert.equal(error.kind, "deferred", asked);
    assert.equal(error.delayMs, MAX_DELAY_MS, asked);
    assert.equal(
      error.message,
      `GET http://api.test/v1/orders answered 429 Too Many Requests, Retry-After ${seconds}s, capped at the longest hold of 2147483.647s`,
    );
  }
});

test("a 429 or 503 without a usable Retry-After is retryable", () => {
  for (const [status, header] of [
    [429, undefined],
    [503, undefined],
    [429, "soon"],
    [503, "1.5"],
    [429, "-1"],
    [503, ""],
  ]) {
    const headers = header === undefined ? {} : { "retry-after": header };
    const error = result(response(status, { headers, body: "busy" }));
    assert.equal(error.kind, "retryable", `${status} ${header}`);
    assert.ok(error.message.endsWith("without a usable Retry-After: busy"), error.message);
  }
});

test("any other 5xx is retryable with the status and the body", () => {
  assert.deepEqual(
    result(response(500, { body: "database is down\n" })),
    retryable("GET http://api.test/v1/orders answered 500 Internal Server Error: database is down"),
  );
  for (const status of [502, 504, 599]) assert.equal(result(response(status)).kind, "retryable", `${status}`);
});

test("a Retry-After on another 5xx does not defer", () => {
  assert.equal(result(response(500, { headers: { "retry-after": "5" } })).kind, "retryable");
});

test("any other 4xx is fatal with the status and the body", () => {
  assert.deepEqual(
    result(response(422, { body: '{"error":"unknown customer"}' })),
    fatal('GET http://api.test/v1/orders answered 422 Unprocessable Content: {"error":"unknown customer"}'),
  );
  for (const status of [400, 401, 403, 404, 408, 499]) assert.equal(result(response(status)).kind, "fatal");
  assert.deepEqual(result(response(404)), fatal("GET http://api.test/v1/orders answered 404 Not Found"), "no body, no excerpt");
});

test("a redirect not followed is fatal and names where it leads", () => {
  assert.deepEqual(
    result(response(301, { headers: { location: "https://api.test/v2/orders" } })),
    fatal(
      "GET http://api.test/v1/orders answered 301 Moved Permanently, a redirect to " +
        "`https://api.test/v2/orders` the request does not follow (see `followRedirects`)",
    ),
  );
  assert.equal(result(response(100)).kind, "fatal");
});

test("the body excerpt is bounded and one line", () => {
  const body = `line one\nline\u001b[31m two\r\n${"x".repeat(10_000)}`;
  const { message } = result(response(400, { body }));
  assert.ok(message.length < 700, `${message.length}: ${message}`);
  assert.ok(!/[\u0000-\u001f\u007f-\u009f]/.test(message), message);
  assert.ok(message.includes("line one\\nline\\u{1b}[31m two\\r\\n"), message);
  assert.ok(message.endsWith(`… (${body.length} bytes in all)`), message);
});

test("a body that is not UTF-8 is quoted lossily, and invisible characters are escaped", () => {
  assert.equal(excerpt(new Uint8Array([0x63, 0x61, 0x66, 0xe9, 0x20, 0xff])), "caf\ufffd \ufffd");
  assert.equal(excerpt(new TextEncoder().encode("a\u202eb\u200dc")), "a\\u{202e}b\u200dc");
});

test("Retry-After reads delta-seconds and the three HTTP date forms", () => {
  assert.equal(parseRetryAfter(" 120 ", NOW), 120_000);
  assert.equal(parseRetryAfter("Thu, 03 Dec 2026 12:00:10 GMT", NOW), 10_000, "IMF-fixdate");
  assert.equal(parseRetryAfter("Thursday, 03-Dec-26 12:00:10 GMT", NOW), 10_000, "RFC 850");
  assert.equal(parseRetryAfter("Thu Dec  3 12:00:10 2026", NOW), 10_000, "asctime");
  for (const unusable of ["", "1.5", "-1", "soon", "Fri, 03 Dec 2026 12:00:10 GMT", "Thu, 03 Dec 2026 12:00:10 UTC", "Thu, 32 Dec 2026 12:00:10 GMT"]) {
    assert.equal(parseRetryAfter(unusable, NOW), undefined, unusable);
  }
  assert.equal(parseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"), Date.UTC(1994, 10, 6, 8, 49, 37));
  assert.equal(parseRetryAfter("Thu, 03 Dec 2026 12:00:10 GMT", NOW + 250), 9_750, "counted from the clock, not rounded");
});

/** Runs `handler` against `responder`, returning its error and the requests it sent. */
async function run(responder, handler) {
  const done = await new TestContext({ http: responder }).run(handler, {});
  return [done.error, done.requests];
}

/** A server where `/old` moves to `/new` with `status` and `/new` answers 200. */
const moved = (status) => (request) =>
  request.url.endsWith("/old") ? new Response(status, { headers: { Location: "/new" } }) : new Response(200);

test("a request reaches the server as written", async () => {
  const [error, requests] = await run(
    () => new Response(202),
    async () => {
      const response = await http.post("http://hooks.test/in", {
        headers: { "X-Signature": "sha256=00" },
        json: { event: "order.created" },
        timeout: "3s",
      });
      response.jobResult();
    },
  );
  assert.equal(error, undefined);
  assert.equal(requests.length, 1);
  const [request] = requests;
  assert.equal(request.method, "POST");
  assert.equal(request.url, "http://hooks.test/in");
  assert.equal(request.header("x-signature"), "sha256=00", "names ignore case");
  assert.equal(request.header("content-type"), "application/json");
  assert.deepEqual(request.json(), { event: "order.created" });
  assert.equal(request.timeoutMs, 3_000);
});

test("a response reports the request it answers, without the query", async () => {
  const [error] = await run(
    () => new Response(404, { body: "no such order" }),
    async () => (await http.get("http://api.test/orders/7?key=s3cr3t")).jobResult(),
  );
  assert.deepEqual(error, fatal("GET http://api.test/orders/7 answered 404 Not Found: no such order"));
});

test("a response's status, headers and body read as sent", async () => {
  const [error] = await run(
    () => new Response(200, { headers: [["Content-Type", "application/json"], ["set-cookie", "a"], ["set-cookie", "b"]], json: { id: 7 } }),
    async () => {
      const response = await http.get("http://api.test/orders/7");
      assert.equal(response.status, 200);
      assert.equal(response.header("content-type"), "application/json");
      assert.deepEqual(response.headers.filter(([n]) => n === "set-cookie"), [["set-cookie", "a"], ["set-cookie", "b"]]);
      assert.ok(response.body instanceof Uint8Array);
      assert.equal(response.text(), '{"id":7}');
      assert.deepEqual(response.json(), { id: 7 });
    },
  );
  assert.equal(error, undefined);
});

test("a redirect is the response unless the request follows redirects", async () => {
  const [error, requests] = await run(moved(302), async () => {
    const response = await http.get("http://api.test/old");
    assert.equal(response.status, 302);
    response.jobResult();
  });
  assert.equal(error.kind, "fatal");
  assert.equal(requests.length, 1, "no second request was sent");
});

test("each redirect followed is a request of its own", async () => {
  const [error, requests] = await run(moved(301), async () =>
    (await http.get("http://api.test/old", { followRedirects: 1 })).jobResult(),
  );
  assert.equal(error, undefined);
  assert.deepEqual(requests.map((r) => r.url), ["http://api.test/old", "http://api.test/new"]);
});

test("a 303 or a moved POST continues as a GET without the body", async () => {
  for (const status of [301, 302, 303]) {
    const [error, requests] = await run(moved(status), async () =>
      (await http.post("http://api.test/old", { json: [1, 2], followRedirects: 1 })).jobResult(),
    );
    assert.equal(error, undefined);
    assert.equal(requests[1].method, "GET", `${status}`);
    assert.equal(requests[1].body.length, 0, `${status}`);
    assert.equal(requests[1].header("content-type"), undefined, `${status}`);
  }
});

test("a 307 or 308 repeats the method and the body", async () => {
  for (const status of [307, 308]) {
    const [error, requests] = await run(moved(status), async () =>
      (await http.put("http://api.test/old", { body: "v2", followRedirects: 1 })).jobResult(),
    );
    assert.equal(error, undefined);
    assert.equal(requests[1].method, "PUT");
    assert.equal(requests[1].text(), "v2");
  }
});

test("only the safe headers follow a redirect to another origin", async () => {
  const elsewhere = (request) => {
    if (request.url === "http://api.test/old") return new Response(307, { headers: { location: "/same" } });
    if (request.url === "http://api.test/same") return new Response(308, { headers: { location: "https://cdn.test/file" } });
    return new Response(200);
  };
  const [error, requests] = await run(elsewhere, async () =>
    (
      await http.get("http://api.test/old", {
        headers: [
          ["X-Api-Key", "k3y"],
          ["Authorization", "Bearer t0k3n"],
          ["Accept", "text/plain"],
          ["accept-language", "fr"],
          ["User-Agent", "probe/1"],
        ],
        followRedirects: 5,
      })
    ).jobResult(),
  );
  assert.equal(error, undefined);
  assert.deepEqual(requests[1].headers, requests[0].headers, "same origin");
  assert.equal(requests[2].url, "https://cdn.test/file");
  assert.deepEqual(requests[2].headers.map(([n]) => n), ["Accept", "accept-language", "User-Agent"], "another origin");
});

test("a body is never resent to another origin", async () => {
  for (const status of [307, 308]) {
    const away = (request) =>
      request.url === "http://api.test/in"
        ? new Response(status, { headers: { location: "http://collector.test/in" } })
        : new Response(200);
    const [error, requests] = await run(away, async () => {
      const response = await http.post("http://api.test/in", { json: { card: "4111" }, followRedirects: 5 });
      assert.equal(response.status, status, "the redirect is the response");
      response.jobResult();
    });
    assert.equal(error.kind, "fatal");
    assert.equal(requests.length, 1, `${status}: nothing went to the other origin`);
  }
});

test("redirects beyond the limit end at the last redirect", async () => {
  const endless = () => new Response(302, { headers: { location: "/again" } });
  const [error, requests] = await run(endless, async () =>
    (await http.get("http://api.test/start", { followRedirects: 2 })).jobResult(),
  );
  assert.equal(error.kind, "fatal");
  assert.equal(requests.length, 3, "the first request and two redirects");
});

test("a redirect to no http URL is an invalid request", async () => {
  const [error] = await run(
    () => new Response(302, { headers: { location: "ftp://files.test/x" } }),
    async () => (await http.get("http://api.test/", { followRedirects: 1 })).jobResult(),
  );
  assert.deepEqual(error, fatal("GET http://api.test/ redirected to `ftp://files.test/x`, which is no http(s) URL"));
});

test("a request that got no response fails the job by its kind", async () => {
  for (const [kind, isRetryable] of [
    ["timeout", true],
    ["connection", true],
    ["other", true],
    ["denied", false],
    ["tooLarge", false],
    ["invalid", false],
  ]) {
    const [error] = await run(
      () => {
        throw new HttpError(kind, "it went wrong");
      },
      async () => (await http.get("http://api.test/")).jobResult(),
    );
    assert.equal(new HttpError(kind, "x").retryable, isRetryable, kind);
    assert.deepEqual(error, isRetryable ? retryable("it went wrong") : fatal("it went wrong"), kind);
  }
  assert.throws(() => new HttpError("teapot", "x"), TypeError);
});

test("a handler may catch an HttpError and decide by its kind", async () => {
  const [error] = await run(
    () => {
      throw new HttpError("timeout", "GET http://api.test/ timed out waiting for the response");
    },
    async () => {
      try {
        await http.get("http://api.test/");
      } catch (caught) {
        assert.ok(caught instanceof HttpError);
        assert.equal(caught.kind, "timeout");
        throw fatal(`gave up: ${caught.message}`);
      }
    },
  );
  assert.deepEqual(error, fatal("gave up: GET http://api.test/ timed out waiting for the response"));
});

test("a JSON body that does not encode fails before anything is sent", async () => {
  const cyclic = {};
  cyclic.self = cyclic;
  const [error, requests] = await run(moved(200), async () => (await http.post("http://api.test/in", { json: cyclic })).jobResult());
  assert.equal(error.kind, "fatal");
  assert.ok(error.message.startsWith("the JSON body of POST http://api.test/in does not encode"), error.message);
  assert.equal(requests.length, 0);
});

test("a JobError thrown by jobResult is the SDK's own", async () => {
  const [error] = await run(() => new Response(429, { headers: { "retry-after": "2" } }), async () =>
    (await http.get("http://api.test/")).jobResult(),
  );
  assert.ok(error instanceof JobError);
  assert.deepEqual(error, retryAfter(2_000, "GET http://api.test/ answered 429 Too Many Requests, Retry-After 2s"));
});
