//! `jobhost new --lang js NAME`: a JavaScript plugin that builds, loads and passes its own
//! `node --test` as generated.
//!
//! The package depends on the JavaScript SDK by a `file:` path (the `sdk-js` of the
//! repository that holds the plugin directory, else of the tree this binary was built
//! from; `@jobhost/sdk` is not published), and pins its build tools exactly in its
//! `devDependencies`, so `jobhost build` installs them into the plugin's own
//! `node_modules`. `jobhost new` runs that `npm install` itself, so that `node --test`
//! passes at once.

use std::path::Path;

use anyhow::{Context, bail};
use tracing::{info, warn};

use super::build_js;
use super::scaffold::{FoundSdk, find_sdk, snake, write};

/// Where this binary's own JavaScript SDK lies, for a plugin directory outside the
/// repository.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk-js");

/// The componentize-js every new plugin pins: the version this host's tests build with.
const COMPONENTIZE_JS: &str = "0.23.0";

/// The esbuild every new plugin pins, to bundle its modules for componentize-js.
const ESBUILD: &str = "0.28.2";

/// Write the JavaScript plugin `name` at `root`, in the plugin directory `dir`, and
/// install its packages.
pub(super) async fn run(
    dir: &Path,
    root: &Path,
    name: &str,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    let dependency = match sdk {
        Some(path) => match std::fs::canonicalize(path) {
            Ok(sdk) if is_sdk(&sdk) => format!("file:{}", sdk.display()),
            _ => bail!(
                "`{}` is not the jobhost JavaScript SDK: with `--lang js`, `--sdk` names the \
                 directory of `@jobhost/sdk` (a jobhost checkout's `sdk-js` directory)",
                path.display()
            ),
        },
        None => match find_sdk(root, "sdk-js", Path::new(BUILT_FROM_SDK), is_sdk) {
            FoundSdk::Above { up, .. } => format!("file:{up}sdk-js"),
            FoundSdk::At(sdk) => format!("file:{}", sdk.display()),
            FoundSdk::Nowhere => bail!(
                "no jobhost JavaScript SDK found (none in a repository above the plugin \
                 directory, and the source tree this binary was built from is gone), and \
                 `@jobhost/sdk` is not published: run `jobhost new --lang js` again with \
                 `--sdk PATH` naming a jobhost checkout's `sdk-js` directory"
            ),
        },
    };
    for sub in ["src", "test"] {
        std::fs::create_dir_all(root.join(sub))
            .with_context(|| format!("cannot create `{}`", root.display()))?;
    }
    write(&root.join("package.json"), &package(name, &dependency))?;
    write(&root.join("src/plugin.js"), &plugin(name))?;
    write(&root.join("test/plugin.test.js"), &tests(name))?;
    write(&root.join(".gitignore"), "node_modules/\n.jobhost/\n")?;
    info!(plugin_dir = %root.display(), "created JavaScript plugin `{name}`");
    if let Err(err) = build_js::install(root).await {
        warn!(
            error = format!("{err:#}"),
            "the plugin is written, but its packages are not installed: run `npm install` in it"
        );
    }
    println!(
        "Created {root}.\nNext: edit src/plugin.js and run `node --test` in it; then `jobhost \
         build {name}` builds it into {dir}/{snake}.wasm, where a running host loads it.",
        root = root.display(),
        dir = dir.display(),
        snake = snake(name),
    );
    Ok(())
}

fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("package.json"))
        .is_ok_and(|manifest| manifest.contains("\"name\": \"@jobhost/sdk\""))
}

fn package(name: &str, sdk: &str) -> String {
    // `sdk` is a path or a version, written as a JSON string.
    let sdk = serde_json::Value::from(sdk);
    format!(
        r#"{{
  "name": "{name}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "scripts": {{
    "test": "node --test"
  }},
  "dependencies": {{
    "@jobhost/sdk": {sdk}
  }},
  "devDependencies": {{
    "@bytecodealliance/componentize-js": "{COMPONENTIZE_JS}",
    "esbuild": "{ESBUILD}"
  }}
}}
"#
    )
}

fn plugin(name: &str) -> String {
    let snake = snake(name);
    format!(
        r#"// The `{name}` plugin: job type `{snake}.Greet` on queue `{snake}.work`.
//
// Build it with `jobhost build {name}`; a running host loads it from the plugin directory.
// Try it with `jobhost enqueue {snake}.Greet '{{"name": "Ada"}}'`. `node --test` runs the
// handler natively (see test/plugin.test.js).

import {{ fatal, job, plugin, queue }} from "@jobhost/sdk";

/** Three attempts with exponential waits (1s, 2s) before a job is dead-lettered. */
const work = queue("{snake}.work", {{ retry: {{ maxAttempts: 3 }} }});

/**
 * Greets `job.name`; an empty name is fatal, since no retry can fix it.
 * @param {{{{ name: string }}}} job
 * @param {{import("@jobhost/sdk").JobContext}} ctx
 */
export function greet(job, ctx) {{
  if (!job.name) {{
    throw fatal("nobody to greet: `name` is empty");
  }}
  ctx.log("info", "hello", {{ name: job.name }});
}}

export default plugin({{
  name: "{name}",
  queues: [work],
  jobs: [job("{snake}.Greet", {{ queue: work, handler: greet }})],
}});
"#
    )
}

fn tests(name: &str) -> String {
    format!(
        r#"// `node --test` runs the `{name}` handler natively, with a fake context.

import assert from "node:assert/strict";
import {{ test }} from "node:test";

import {{ fatal }} from "@jobhost/sdk";
import {{ TestContext }} from "@jobhost/sdk/testing";

import {{ greet }} from "../src/plugin.js";

test("a name is greeted in the log", async () => {{
  const run = await new TestContext().run(greet, {{ name: "Ada" }});
  assert.equal(run.error, undefined);
  assert.deepEqual(run.messages(), ["hello"]);
  assert.equal(run.logs[0].field("name"), "Ada");
}});

test("an empty name is fatal on any attempt", async () => {{
  const run = await new TestContext().attempt(2).run(greet, {{ name: "" }});
  assert.deepEqual(run.error, fatal("nobody to greet: `name` is empty"));
}});
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaffold_and_the_example_pin_the_same_build_tools_exactly() {
        let scaffold: serde_json::Value =
            serde_json::from_str(&package("greeter-js", "file:../../sdk-js")).expect("JSON");
        assert_eq!(
            scaffold["dependencies"]["@jobhost/sdk"],
            "file:../../sdk-js"
        );
        let example = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugins/email-sender-js/package.json"
        );
        let example: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(example).expect("the example"))
                .expect("JSON");
        for (tool, version) in [
            ("@bytecodealliance/componentize-js", COMPONENTIZE_JS),
            ("esbuild", ESBUILD),
        ] {
            assert_eq!(scaffold["devDependencies"][tool], version, "{tool}");
            assert_eq!(example["devDependencies"][tool], version, "{tool}");
        }
    }
}
