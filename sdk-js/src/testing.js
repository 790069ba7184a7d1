// @jobhost/sdk/testing: run a handler natively, under `node --test`, with a fake delivery
// (the Rust SDK's `TestContext`). The handler meets the same `ctx` as in the component
// (same checks on log levels, follow-up payloads and delays); what it logged, what it
// enqueued and how it ended are recorded in the returned `Run`.
//
//   const run = await new TestContext().attempt(2).run(sendEmail, { to: "a@b" });
//   assert.equal(run.error?.kind, "retryable");

import { createContext } from "./context.js";
import { outcomeOf } from "./errors.js";

/** A delivery to run a handler against; every setter returns the context, for chaining. */
export class TestContext {
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
    const ctx = createContext({ ...this.#delivery }, {
      log: (level, message, fields) => run.logs.push(new LogLine(level, message, fields)),
      enqueue: (jobType, bytes, delayMs) => {
        const id = `follow-up-${run.followUps.length + 1}`;
        const payload = JSON.parse(new TextDecoder().decode(bytes));
        run.followUps.push({ id, jobType, payload, delayMs });
        return id;
      },
    });
    try {
      await handler(payload, ctx);
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
