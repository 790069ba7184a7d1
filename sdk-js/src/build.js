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
// 4. componentize-js turns the bundle into the component, written to `--out`.
//
// esbuild and componentize-js are the plugin's own (exact) devDependencies, resolved from
// the plugin's directory, so every plugin pins the toolchain it was tested with.
// Exit status 1 with a message on stderr for any failure.

import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath, pathToFileURL } from "node:url";

/** The `jobhost:plugin` version this SDK's component side speaks. */
export const WIT_VERSION = "0.4.0";

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
    external: ["jobhost:plugin/*"],
    outfile: bundled,
    logLevel: "warning",
  });
  const { component } = await componentize({
    sourcePath: bundled,
    witPath: resolve(values.wit),
    worldName: "plugin",
    // Outbound HTTP (`fetch`) is not offered to JavaScript plugins yet, and a job handler
    // serves no incoming requests: neither is linked into the component.
    disableFeatures: ["http", "fetch-event"],
  });
  await writeFile(values.out, component);
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
