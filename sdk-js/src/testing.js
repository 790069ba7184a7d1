// @jobhost/sdk/testing: run a handler natively, under `node --test`, with a fake delivery
// (the Rust SDK's `TestContext`). The handler meets the same `ctx` as in the component
// (same checks on log levels, follow-up payloads and delays), reads the config values the
// test gives, and its HTTP requests go to the test's responder; what it logged, enqueued
// and sent and how it ended are recorded in the returned `Run`.
//
//   const run = await new TestContext({
//     config: { api_base: "http://api.test" },
//     http: (request) => new Response(429, { headers: { "retry-after": "2" } }),
//   }).attempt(2).run(sendEmail, { to: "a@b" });
//   assert.equal(run.error?.kind, "deferred");
//   assert.equal(run.requests[0].url, "http://api.test/v1/send");
//
// `http` and `config` are module functions, not `ctx` methods, so they find the run they
// belong to through an AsyncLocalStorage: runs may overlap (`test.concurrent`), and each
// handler's awaits stay in its own run.

import { AsyncLocalStorage } from "node:async_hooks";

import { OUTSIDE, install } from "./backend.js";
import { createContext, EnqueueError } from "./context.js";
import { outcomeOf } from "./errors.js";
import { HttpError } from "./http-error.js";
import { Request, Response } from "./http.js";

export { HttpError, Request, Response };

/** The run whose handler is running, in this async context. */
const running = new AsyncLocalStorage();

install({
  send: (request) => (running.getStore() ?? OUTSIDE).send(request),
  config: (key) => (running.getStore() ?? OUTSIDE).config(key),
});

/**
 * A delivery to run a handler against; every setter returns the context, for chaining.
 * Defaults: attempt 1 of 1, no deferrals, priority 0, age 0, a host that accepts every
 * follow-up, no config values, and no HTTP responder (every request fails as one the
 * operator has not granted).
 */
export class TestContext {
  /** @type {Map<string, string>} */
  #config = new Map();
  /** @type {((request: Request) => Response | Promise<Response>) | undefined} */
  #responder = undefined;
  /** @type {string | undefined} */
  #refusal = undefined;

  /**
   * @param {{ config?: Record<string, string>, http?: (request: Request) => Response | Promise<Response> }} [options]
   */
  constructor({ config = {}, http } = {}) {
    for (const [key, value] of Object.entries(config)) this.config(key, value);
    if (http !== undefined) this.respondWith(http);
  }

  #delivery = {
    jobId: "00000000-0000-4000-8000-000000000000",
    jobType: "test.Job",
    queue: "test",
    attempt: 1,
    maxAttempts: 1,
    deferrals: 0,
    priority: 0,
    ageMs: 0,
  };

  jobId(id) { return this.#set("jobId", id); }
  jobType(name) { return this.#set("jobType", name); }
  queue(name) { return this.#set("queue", name); }
  /** The 1-based attempt; raises `maxAttempts` to it when needed. */
  attempt(n) {
    this.#set("attempt", n);
    if (this.#delivery.maxAttempts < n) this.#delivery.maxAttempts = n;
    return this;
  }
  maxAttempts(n) { return this.#set("maxAttempts", n); }
  deferrals(n) { return this.#set("deferrals", n); }
  priority(n) { return this.#set("priority", n); }
  ageMs(ms) { return this.#set("ageMs", ms); }

  /** The config value or secret `key`, as the operator's `jobhost.toml` would give it. */
  config(key, value) {
    if (typeof value !== "string") {
      throw new TypeError(`config value \`${key}\` is a string, as in jobhost.toml; got ${typeof value}`);
    }
    this.#config.set(key, value);
    return this;
  }

  /**
   * Answer every HTTP request the handler sends with `responder(request)`: a `Response`
   * (or a promise of one), or a thrown `HttpError` for a request that got no response,
   * such as a timeout. Each request is recorded in `run.requests`.
   */
  respondWith(responder) {
    if (typeof responder !== "function") throw new TypeError("a responder is a function of the request");
    this.#responder = responder;
    return this;
  }

  /** A host that refuses every follow-up with `reason`, as when no plugin handles its job type. */
  refuseFollowUps(reason) {
    this.#refusal = String(reason);
    return this;
  }

  #set(key, value) {
    this.#delivery[key] = value;
    return this;
  }

  /**
   * Run `handler(payload, ctx)` once, awaiting it if it is async.
   * @returns {Promise<Run>}
   */
  async run(handler, payload) {
    const run = new Run();
    const refusal = this.#refusal;
    const ctx = createContext({ ...this.#delivery }, {
      log: (level, message, fields) => run.logs.push(new LogLine(level, message, fields)),
      enqueue: (jobType, bytes, delayMs) => {
        if (refusal !== undefined) throw new EnqueueError(refusal);
        const id = `follow-up-${run.followUps.length + 1}`;
        const payload = JSON.parse(new TextDecoder().decode(bytes));
        run.followUps.push({ id, jobType, payload, delayMs });
        return id;
      },
    });
    const config = new Map(this.#config);
    const responder = this.#responder;
    const host = {
      config: (key) => config.get(key),
      async send(request) {
        run.requests.push(request);
        if (responder === undefined) {
          throw new HttpError(
            "denied",
            `\`${request.method} ${request.url}\` was sent, and this test answers no request: ` +
              "give the TestContext a responder (`new TestContext({ http })` or `respondWith`)",
          );
        }
        const response = await responder(request);
        if (!(response instanceof Response)) {
          throw new TypeError(`a responder returns a Response of @jobhost/sdk/testing, got ${String(response)}`);
        }
        // A copy, so that what the handler sees is not the responder's object.
        return new Response(response.status, { headers: response.headers.map(([n, v]) => [n, v]), body: response.body.slice() });
      },
    };
    try {
      await running.run(host, () => handler(payload, ctx));
    } catch (thrown) {
      run.error = outcomeOf(thrown);
    }
    return run;
  }
}

/** What one run of a handler did. */
export class Run {
  /** How the job ended: undefined when it completed, else its `JobError`. */
  error = undefined;
  /** @type {LogLine[]} */
  logs = [];
  /** @type {{ id: string, jobType: string, payload: unknown, delayMs: number | undefined }[]} */
  followUps = [];
  /** Every HTTP request sent, in order, each redirect followed as a request of its own. @type {Request[]} */
  requests = [];

  /** The messages logged, in order. */
  messages() {
    return this.logs.map((line) => line.message);
  }
}

/** One `ctx.log` call, its fields as the host receives them (strings). */
export class LogLine {
  constructor(level, message, fields) {
    this.level = level;
    this.message = message;
    this.fields = fields;
  }

  /** The value of the field `key`, or undefined. */
  field(key) {
    return this.fields.find(([name]) => name === key)?.[1];
  }
}
