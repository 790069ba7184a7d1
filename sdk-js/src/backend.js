// Where `http` and `config` go: the one thing that differs between a plugin in the
// component and one under `node --test`. The component's side (guest.js) installs the
// host's `wasi:http` and `wasi:config/store`; `@jobhost/sdk/testing` installs the running
// TestContext's answers. Until either does (a handler called by hand in Node), no request
// is answered and no key is set, as in the Rust SDK outside `TestContext::run`.

import { HttpError } from "./http-error.js";

/**
 * @typedef {object} Backend
 * @property {(request: import("./http.js").Request) => Promise<import("./http.js").Response>} send
 *   one request, no redirect followed; rejects with an `HttpError` when there is no response
 * @property {(key: string) => string | undefined} config
 *   a config value or secret; throws a retryable `JobError` when the host cannot read it
 */

/** @type {Backend} */
const outside = {
  async send(request) {
    throw new HttpError(
      "denied",
      `\`${request.method} ${request.url}\` was sent outside \`TestContext.run\`, where no request is answered`,
    );
  },
  config: () => undefined,
};

let installed = outside;

/** Make `backend` the one every later request and config read goes to. */
export function install(backend) {
  installed = backend;
}

/** @returns {Backend} */
export function backend() {
  return installed;
}

/** The backend of a plugin outside the component and outside a test run. */
export const OUTSIDE = outside;
