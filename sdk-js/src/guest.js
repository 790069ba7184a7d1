// The component side of a JavaScript plugin: the `handler` export of the `jobhost:plugin`
// world over a declared plugin. `jobhost build` bundles this module with the plugin and
// componentize-js turns it into the component; it is never imported in Node, since
// `jobhost:plugin/host` (imported with its version, as componentize-js names it) exists only inside the component.
//
// WIT values as componentize-js passes them: records are objects with camelCase fields,
// `u64` is a BigInt, an `option` is the value or undefined, a variant is `{ tag, val }`, an
// exported `result` is the returned value or a thrown `{ tag, val }` error, and an imported
// one returns its `ok` value or throws an error whose `payload` is the `err` value.

import { enqueue, log } from "jobhost:plugin/host@0.5.0";
import { get as configGet } from "wasi:config/store@0.2.0-rc.1";
import { handle } from "wasi:http/outgoing-handler@0.2.12";
import {
  Fields,
  IncomingBody,
  OutgoingBody,
  OutgoingRequest,
  RequestOptions,
  httpErrorCode,
} from "wasi:http/types@0.2.12";

import { install } from "./backend.js";
import { EnqueueError, createContext } from "./context.js";
import { retryable } from "./errors.js";
import { runDelivery } from "./run.js";
import { wasiSender } from "./wasi-http.js";

// `http` and `config` go to the host: `wasi:http/outgoing-handler` and `wasi:config/store`,
// which the world `plugin-js` imports (sdk-js/wit/js.wit).
install({
  send: wasiSender({ handle, Fields, IncomingBody, OutgoingBody, OutgoingRequest, RequestOptions, httpErrorCode }),
  config(key) {
    try {
      return configGet(key);
    } catch (error) {
      // The Rust SDK's `ConfigError`, which `?` makes retryable.
      const failed = error?.payload;
      throw retryable(
        failed?.tag === "upstream"
          ? `the configuration source failed: ${failed.val}`
          : `reading the configuration failed: ${failed?.val ?? error?.message ?? String(error)}`,
      );
    }
  },
});

const sink = {
  log,
  enqueue(jobType, payload, delayMs) {
    try {
      return enqueue(jobType, payload, delayMs === undefined ? undefined : BigInt(delayMs));
    } catch (error) {
      throw new EnqueueError(String(error?.payload ?? error?.message ?? error));
    }
  },
};

/** The `handler` export serving `declared` (the default export of the plugin's module). */
export function serve(declared) {
  return {
    manifest: () => manifest(declared),
    async handle(context, payload) {
      const ctx = createContext(
        {
          jobId: context.jobId,
          jobType: context.jobType,
          queue: context.queue,
          attempt: context.attempt,
          maxAttempts: context.maxAttempts,
          deferrals: context.deferrals,
          priority: context.priority,
          ageMs: Number(context.age),
        },
        sink,
      );
      const error = await runDelivery(declared, ctx, payload);
      if (error !== undefined) throw witError(error);
    },
  };
}

function witError(error) {
  if (error.kind === "deferred") {
    return {
      tag: "deferred",
      val: { delay: BigInt(error.delayMs), reason: error.message, retryAfter: error.retryAfter },
    };
  }
  return { tag: error.kind, val: error.message };
}

function manifest(declared) {
  return {
    name: declared.name,
    queues: declared.queues.map((q) => ({
      name: q.name,
      prefetch: q.prefetch,
      durable: q.durable,
      queueType: q.queueType,
      maxPriority: q.maxPriority,
      messageTtl: ms(q.messageTtlMs),
      retry: retryPolicy(q.retry),
      timeout: ms(q.timeoutMs),
      concurrency: q.concurrency,
      rate: q.rate,
    })),
    jobs: declared.jobs.map((j) => ({
      name: j.name,
      queue: j.queue,
      retry: retryPolicy(j.retry),
      timeout: ms(j.timeoutMs),
      concurrency: j.concurrency,
      rate: j.rate,
      unique: j.unique && { key: j.unique.key, for: BigInt(j.unique.forMs) },
      schedule: jobSchedule(j.schedule),
    })),
  };
}

function jobSchedule(schedule) {
  if (schedule === undefined) return undefined;
  const { timing } = schedule;
  return {
    timing:
      timing.kind === "cron"
        ? { tag: "cron", val: { expression: timing.expression, tz: timing.tz } }
        : { tag: "every", val: BigInt(timing.periodMs) },
    payload: schedule.payload,
    catchUp: schedule.catchUp,
  };
}

function retryPolicy(policy) {
  if (policy === undefined) return undefined;
  const { backoff } = policy;
  let val;
  if (backoff.kind === "fixed") val = BigInt(backoff.delayMs);
  if (backoff.kind === "exponential") {
    val = { base: BigInt(backoff.baseMs), factor: backoff.factor, max: BigInt(backoff.maxMs), jitter: backoff.jitter };
  }
  return { maxAttempts: policy.maxAttempts, backoff: val === undefined ? { tag: "none" } : { tag: backoff.kind, val } };
}

function ms(value) {
  return value === undefined ? undefined : BigInt(value);
}
