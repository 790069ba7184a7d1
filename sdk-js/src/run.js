// Running one delivery of a declared plugin, for the component and for the test helper
// alike: find the job type's handler, decode the payload, await the handler, and turn
// what it threw into a `JobError`.

import { JobError, fatal, outcomeOf } from "./errors.js";

/**
 * @returns {Promise<JobError | undefined>} undefined when the job completed
 */
export async function runDelivery(declared, ctx, payloadBytes) {
  const route = declared.jobs.find((j) => j.name === ctx.jobType);
  if (route === undefined) {
    return fatal(
      `plugin has no handler for job type \`${ctx.jobType}\` (it handles: ${declared.jobs.map((j) => j.name).join(", ")})`,
    );
  }
  let payload;
  try {
    payload = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payloadBytes));
    if (route.decode !== undefined) payload = route.decode(payload);
  } catch (error) {
    return new JobError("decode", error instanceof Error ? error.message : String(error));
  }
  try {
    await route.handler(payload, ctx);
    return undefined;
  } catch (thrown) {
    return outcomeOf(thrown);
  }
}
