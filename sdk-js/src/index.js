// @jobhost/sdk: write jobhost job handlers in JavaScript. See docs/javascript.md.
//
//   import { plugin, queue, job, fatal } from "@jobhost/sdk";
//   const work = queue("greeter.work", { retry: { maxAttempts: 3 } });
//   export default plugin({ name: "greeter", queues: [work], jobs: [job("greeter.Greet", { queue: work, handler })] });

export { queue, job, plugin, DeclarationError } from "./declare.js";
export { JobError, retryable, fatal, deferred, retryAfter } from "./errors.js";
export { EnqueueError } from "./context.js";
export { MAX_DELAY_MS, parseDuration } from "./duration.js";
export * as http from "./http.js";
export * as config from "./config.js";
export { HttpError } from "./http-error.js";
export { Request, Response } from "./http.js";
