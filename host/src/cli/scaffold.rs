//! `jobhost new NAME`: a plugin crate that builds and loads as generated (`--lang js`: a
//! JavaScript plugin, see [`scaffold_js`](super::scaffold_js); `--lang python`: a Python
//! plugin, see [`scaffold_py`](super::scaffold_py)).
//!
//! The crate is its own cargo workspace (an empty `[workspace]` table) rather than a
//! member of the project's: `jobhost new` then never edits a `Cargo.toml` it does not
//! own, works in any plugin directory (inside this repository or not), and a half-written
//! plugin cannot break `cargo build`/`cargo test --workspace` of everything else. The
//! price is a target directory of its own, so its first build compiles its dependencies.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tracing::{info, warn};

/// Where this binary's own SDK lies, for a plugin directory outside the repository.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// The language of a plugin `jobhost new` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(super) enum Lang {
    /// A Rust crate of its own workspace.
    #[default]
    Rust,
    /// A JavaScript package (ES modules) built by componentize-js.
    Js,
    /// A Python project built by componentize-py.
    #[value(alias = "py")]
    Python,
}

/// `jobhost new [--lang LANG] NAME [--sdk PATH]`.
pub(super) async fn run(
    dir: &Path,
    name: &str,
    lang: Lang,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    check_name(name)?;
    let dir = std::fs::canonicalize(dir).with_context(|| {
        format!(
            "the plugin directory `{}` does not exist: create it, or pass `--plugins DIR`",
            dir.display()
        )
    })?;
    let root = dir.join(name);
    if root.exists() {
        bail!("`{}` already exists; pick another name", root.display());
    }
    match lang {
        Lang::Rust => new_crate(&dir, &root, name, sdk),
        Lang::Js => super::scaffold_js::run(&dir, &root, name, sdk).await,
        Lang::Python => super::scaffold_py::run(&dir, &root, name, sdk).await,
    }
}

/// Write the plugin crate `name` at `root`, in the plugin directory `dir`.
fn new_crate(dir: &Path, root: &Path, name: &str, sdk: Option<&Path>) -> anyhow::Result<()> {
    let sdk = match sdk {
        Some(path) => given_sdk(path)?,
        None => sdk_dependency(root, Path::new(BUILT_FROM_SDK)),
    };
    std::fs::create_dir_all(root.join("src"))
        .with_context(|| format!("cannot create `{}`", root.display()))?;
    write(&root.join("Cargo.toml"), &manifest(name, &sdk.dependency))?;
    write(&root.join("src/lib.rs"), &library(name))?;
    write(&root.join(".gitignore"), "/target\n")?;
    if let Some(lock) = sdk.lockfile {
        // The project's versions, so the plugin builds with what is already tested.
        std::fs::copy(&lock, root.join("Cargo.lock"))
            .with_context(|| format!("cannot copy `{}`", lock.display()))?;
    }
    info!(crate_dir = %root.display(), "created plugin `{name}`");
    if sdk.unpublished {
        warn!(
            crate_dir = %root.display(),
            "no jobhost SDK found (none in a repository above the plugin directory, and the \
             source tree this binary was built from is gone): the scaffold depends on \
             `jobhost-sdk = {sdk}`, which is not published on crates.io, so its first build \
             fails; run `jobhost new` again with `--sdk PATH` naming a jobhost checkout's \
             `sdk` directory, or edit that line of Cargo.toml",
            sdk = sdk.dependency
        );
    }
    println!(
        "Created {root}.\nNext: edit src/lib.rs, then `jobhost build {name}` compiles it into \
         {dir}/{snake}.wasm, where a running host loads it.",
        root = root.display(),
        dir = dir.display(),
        snake = snake(name),
    );
    Ok(())
}

pub(super) fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !starts_well || !rest_ok || name.ends_with('-') {
        bail!(
            "`{name}` is not a plugin name: use lowercase letters, digits and `-`, starting \
             with a letter (e.g. `image-resizer`)"
        );
    }
    Ok(())
}

/// How the plugin depends on the SDK, and the lockfile to start from.
#[derive(Debug)]
struct Sdk {
    dependency: String,
    lockfile: Option<PathBuf>,
    /// Whether `dependency` names the version on crates.io, where `jobhost-sdk` is not
    /// published: the first build fails until it names an SDK on disk.
    unpublished: bool,
}

/// Where an SDK was found for a plugin about to be written.
#[derive(Debug)]
pub(super) enum FoundSdk {
    /// In the repository that holds the plugin: `up` (`../../`) then the SDK's directory
    /// name lead from the plugin to it; `repository` is the repository's root.
    Above { up: String, repository: PathBuf },
    /// Elsewhere, at this absolute path (this binary's source tree).
    At(PathBuf),
    /// Nowhere on disk.
    Nowhere,
}

/// The SDK directory named `sdk_dir` of the repository that holds `root`; else the SDK
/// at `built_from` (this binary's source tree); else none. `is_sdk` tells an SDK
/// directory from any other directory of that name.
pub(super) fn find_sdk(
    root: &Path,
    sdk_dir: &str,
    built_from: &Path,
    is_sdk: fn(&Path) -> bool,
) -> FoundSdk {
    for (depth, ancestor) in root.ancestors().enumerate().skip(1) {
        if is_sdk(&ancestor.join(sdk_dir)) {
            return FoundSdk::Above {
                up: "../".repeat(depth),
                repository: ancestor.to_owned(),
            };
        }
    }
    match std::fs::canonicalize(built_from) {
        Ok(sdk) if is_sdk(&sdk) => FoundSdk::At(sdk),
        _ => FoundSdk::Nowhere,
    }
}

/// The SDK of the repository that holds `root`, by relative path; else the SDK at
/// `built_from` (this binary's source tree); else the crates.io version, which does not
/// exist.
fn sdk_dependency(root: &Path, built_from: &Path) -> Sdk {
    match find_sdk(root, "sdk", built_from, is_sdk) {
        FoundSdk::Above { up, repository } => Sdk {
            dependency: format!("{{ path = \"{up}sdk\" }}"),
            lockfile: Some(repository.join("Cargo.lock")).filter(|l| l.is_file()),
            unpublished: false,
        },
        FoundSdk::At(sdk) => by_path(&sdk),
        FoundSdk::Nowhere => Sdk {
            dependency: format!("\"{}\"", env!("CARGO_PKG_VERSION")),
            lockfile: None,
            unpublished: true,
        },
    }
}

/// The SDK the operator named with `--sdk`.
fn given_sdk(path: &Path) -> anyhow::Result<Sdk> {
    match std::fs::canonicalize(path) {
        Ok(sdk) if is_sdk(&sdk) => Ok(by_path(&sdk)),
        _ => bail!(
            "`{}` is not the jobhost SDK: `--sdk` names the directory of the `jobhost-sdk` \
             crate (a jobhost checkout's `sdk` directory)",
            path.display()
        ),
    }
}

/// A dependency on the SDK at the absolute path `sdk`, with its repository's lockfile.
fn by_path(sdk: &Path) -> Sdk {
    Sdk {
        dependency: format!("{{ path = \"{}\" }}", sdk.display()),
        lockfile: sdk
            .parent()
            .map(|repo| repo.join("Cargo.lock"))
            .filter(|l| l.is_file()),
        unpublished: false,
    }
}

fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|manifest| manifest.contains("name = \"jobhost-sdk\""))
}

pub(super) fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))
}

/// `image-resizer` -> `image_resizer`.
pub(super) fn snake(name: &str) -> String {
    name.replace('-', "_")
}

/// `image-resizer` -> `ImageResizer`.
fn pascal(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn manifest(name: &str, sdk: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
jobhost-sdk = {sdk}
serde = {{ version = "1", features = ["derive"] }}

# A workspace of its own: `jobhost build {name}` builds it wherever it lies.
[workspace]

# Small components: the debug info would be nine tenths of the size. Panic messages keep
# their locations, traps their function names.
[profile.release]
debug = "line-tables-only"
strip = "debuginfo"
"#
    )
}

fn library(name: &str) -> String {
    let (snake, pascal) = (snake(name), pascal(name));
    format!(
        r#"//! The `{name}` plugin: job type `{snake}.Greet` on queue `{snake}.work`.
//!
//! Build it with `jobhost build {name}`; a running host loads it from the plugin
//! directory. Try it with `jobhost enqueue {snake}.Greet '{{"name": "Ada"}}'`.
//! `cargo test` runs the handler natively (see the tests below).

use jobhost_sdk::prelude::*;
use serde::{{Deserialize, Serialize}};

/// The plugin's queues, named `{snake}.<variant in snake_case>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "{snake}")]
enum {pascal}Queues {{
    /// Three attempts with exponential waits (1s, 2s) before a job is dead-lettered.
    #[queue(retry(max_attempts = 3))]
    Work,
}}

/// A greeting to log.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "{snake}.Greet", queue = {pascal}Queues::Work)]
struct Greet {{
    name: String,
}}

/// Greets `job.name`; an empty name is fatal, since no retry can fix it.
fn greet(job: Greet, ctx: &JobContext) -> Result<(), JobError> {{
    if job.name.is_empty() {{
        return Err(JobError::fatal("nobody to greet: `name` is empty"));
    }}
    ctx.log(Level::Info, "hello", &[("name", &job.name)]);
    Ok(())
}}

jobhost_sdk::plugin!(queues = {pascal}Queues, jobs = {{ Greet => greet }});

#[cfg(test)]
mod tests {{
    use jobhost_sdk::testing::TestContext;

    use super::*;

    #[test]
    fn a_name_is_greeted_in_the_log() {{
        let run = TestContext::new().run(greet, Greet {{ name: "Ada".into() }});
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.messages(), ["hello"]);
        assert_eq!(run.logs[0].field("name"), Some("Ada"));
    }}

    #[test]
    fn an_empty_name_is_fatal_on_any_attempt() {{
        let run = TestContext::new()
            .attempt(2)
            .run(greet, Greet {{ name: String::new() }});
        assert_eq!(
            run.result,
            Err(JobError::fatal("nobody to greet: `name` is empty"))
        );
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_snake_and_pascal_case() {
        assert_eq!(snake("image-resizer"), "image_resizer");
        assert_eq!(pascal("image-resizer"), "ImageResizer");
        assert_eq!(pascal("a2b"), "A2b");
    }

    #[test]
    fn without_an_sdk_on_disk_the_scaffold_names_the_unpublished_crate_and_says_so() {
        let outside = tempfile::tempdir().expect("a temp dir");
        let sdk = sdk_dependency(&outside.path().join("p"), &outside.path().join("gone/sdk"));
        assert!(sdk.unpublished, "{sdk:?}");
        assert_eq!(sdk.dependency, format!("\"{}\"", env!("CARGO_PKG_VERSION")));
        let built = sdk_dependency(&outside.path().join("p"), Path::new(BUILT_FROM_SDK));
        assert!(
            !built.unpublished,
            "this binary's source tree is here: {built:?}"
        );
    }

    #[test]
    fn only_lowercase_kebab_names_are_accepted() {
        for good in ["hello", "image-resizer", "v2-api"] {
            assert!(check_name(good).is_ok(), "`{good}` is a valid name");
        }
        for bad in ["", "Hello", "2fast", "a_b", "trailing-", "sp ace"] {
            assert!(check_name(bad).is_err(), "`{bad}` is refused");
        }
    }
}
