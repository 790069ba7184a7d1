#!/usr/bin/env node
// Building a JavaScript plugin into a component of the `jobhost:plugin` world; run by
// `jobhost build` in the plugin's directory, after `npm install`:
//
//   node node_modules/@jobhost/sdk/src/build.js --wit DIR --out FILE
//
// 1. Import the plugin's entry (package.json `jobhost.main`, default `src/plugin.js`) in
//    Node: its declarations are checked as they run, so a bad retry policy fails here,
//    with every problem listed, before anything is built.
// 2. Check the WIT the host gave (`--wit`, the contract the building `jobhost` speaks) is
//    the version this SDK speaks.
// 3. Bundle the entry and the SDK's component side into one ES module with esbuild.
// 4. componentize-js turns the bundle into the component, written to `--out`, against the
//    world `plugin-js` (`sdk-js/wit/js.wit`): the host's `plugin` world, `wasi:config` and
//    `wasi:http/outgoing-handler`, put together in the scratch directory beside the
//    host's `jobhost.wit`, which is never changed.
//
// esbuild and componentize-js are the plugin's own (exact) devDependencies, resolved from
// the plugin's directory, so every plugin pins the toolchain it was tested with.
// Exit status 1 with a message on stderr for any failure.

import { cp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath, pathToFileURL } from "node:url";

/** The `jobhost:plugin` version this SDK's component side speaks. */
export const WIT_VERSION = "0.5.0";

/** The build's scratch directory in the plugin, ignored by the scaffold's .gitignore. */
const SCRATCH = ".jobhost";

async function main() {
  const { values } = parseArgs({ options: { wit: { type: "string" }, out: { type: "string" } } });
  if (values.wit === undefined || values.out === undefined) {
    fail("usage: build.js --wit DIR --out FILE (run by `jobhost build`)");
  }
  const pluginDir = process.cwd();
  const manifest = JSON.parse(await readFile(join(pluginDir, "package.json"), "utf8"));
  const entry = resolve(pluginDir, manifest.jobhost?.main ?? "src/plugin.js");

  const declared = (await import(pathToFileURL(entry))).default;
  if (declared?.kind !== "plugin") {
    fail(`${entry} must \`export default plugin({ name, queues, jobs })\` from "@jobhost/sdk"`);
  }
  await checkWitVersion(values.wit);

  const scratch = join(pluginDir, SCRATCH);
  await mkdir(scratch, { recursive: true });
  const guest = fileURLToPath(new URL("./guest.js", import.meta.url));
  await writeFile(
    join(scratch, "guest.js"),
    `import declared from ${JSON.stringify(entry)};\n` +
      `import { serve } from ${JSON.stringify(guest)};\n` +
      "export const handler = serve(declared);\n",
  );
  // Imported from inside the plugin, so Node resolves the tools from its node_modules.
  await writeFile(
    join(scratch, "tools.js"),
    'export { build as bundle } from "esbuild";\n' +
      'export { componentize } from "@bytecodealliance/componentize-js";\n',
  );
  const { bundle, componentize } = await import(pathToFileURL(join(scratch, "tools.js")));

  const bundled = join(scratch, "bundle.js");
  await bundle({
    entryPoints: [join(scratch, "guest.js")],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["jobhost:plugin/*", "wasi:*"],
    outfile: bundled,
    logLevel: "warning",
  });
  const { component } = await componentize({
    sourcePath: bundled,
    witPath: await writeWorld(values.wit, scratch),
    worldName: "plugin-js",
    // The SDK sends requests through the world's own `wasi:http` import (src/wasi-http.js),
    // not StarlingMonkey's `fetch`, and a job handler serves no incoming requests: neither
    // engine feature is linked into the component.
    disableFeatures: ["http", "fetch-event"],
  });
  await writeFile(values.out, component);
}

/**
 * The WIT directory componentize-js reads: the host's `jobhost.wit`, unchanged, beside the
 * SDK's `js.wit` and the `wasi:config` it imports. Written afresh on every build.
 */
async function writeWorld(hostWit, scratch) {
  const world = join(scratch, "world");
  await rm(world, { recursive: true, force: true });
  await mkdir(world, { recursive: true });
  const sdkWit = fileURLToPath(new URL("../wit/", import.meta.url));
  await cp(join(resolve(hostWit), "jobhost.wit"), join(world, "jobhost.wit"));
  await cp(join(sdkWit, "js.wit"), join(world, "js.wit"));
  await cp(join(sdkWit, "deps"), join(world, "deps"), { recursive: true });
  return world;
}

async function checkWitVersion(witDir) {
  const wit = await readFile(join(witDir, "jobhost.wit"), "utf8");
  const version = /^package jobhost:plugin@([^;]+);/m.exec(wit)?.[1];
  if (version !== WIT_VERSION) {
    fail(
      `this @jobhost/sdk speaks jobhost:plugin@${WIT_VERSION}, the building host ` +
        `jobhost:plugin@${version ?? "(none found)"}: use the SDK of this jobhost's checkout`,
    );
  }
}

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(1);
}

// A declaration's error is the author's to read: its message, not Node's stack.
main().catch((error) => fail(error?.name === "DeclarationError" ? error.message : (error?.stack ?? String(error))));
