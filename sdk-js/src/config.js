// Configuration values and secrets the operator gives this plugin (the Rust SDK's
// `jobhost_sdk::config`): plain values in `[plugins.NAME.config]` of `jobhost.toml`,
// secrets in `[plugins.NAME.secrets]`, one key space, read through `wasi:config/store`.
// NAME is the plugin's file name (`email_sender_js` for `email_sender_js.wasm`). Values are
// reloaded with the plugins, so a job retried after the operator fixed one reads the new one.
//
//   import { config } from "@jobhost/sdk";
//   const region = config.get("region") ?? "eu-west-1";
//   const endpoint = config.require("endpoint"); // fatal when the operator set none
//
// Under `node --test` the values are the running TestContext's, and none outside a run.

import { backend } from "./backend.js";
import { fatal } from "./errors.js";

/**
 * The value of `key` (a config value or a secret), or undefined when the operator gave this
 * plugin none.
 * @throws {import("./errors.js").JobError} retryable, when the host could not read it
 */
export function get(key) {
  if (typeof key !== "string") throw new TypeError(`a config key is a string, got ${typeof key}`);
  return backend().config(key);
}

/**
 * The value of `key`, which the plugin cannot work without: a missing key throws a fatal
 * `JobError` naming it and where the operator sets it, because no retry within the job's
 * policy would find it set.
 */
export function require(key) {
  const value = get(key);
  if (value === undefined) {
    throw fatal(
      `the plugin needs the configuration value \`${key}\`: set it in \`jobhost.toml\` under ` +
        "`[plugins.<plugin file name>.config]` (or `.secrets`)",
    );
  }
  return value;
}
