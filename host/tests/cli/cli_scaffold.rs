//! `jobhost new` + `jobhost build` + drop-in: a scaffolded plugin compiles and a running
//! host loads it without a restart. It compiles a crate, so it is the one such test; the
//! crate lives in a temp plugin directory and builds into the fixtures' target directory,
//! so nothing is left in the repository and its dependencies are mostly built already.

use std::time::Duration;

use crate::support::cli::{
    Host, PROCESSING, fixtures_target_dir, jobhost, json_of, logged_id, stdout_of,
};

/// A cold build of the SDK and serde for `wasm32-wasip2` on a small machine.
const BUILD: Duration = Duration::from_secs(600);

#[test]
fn a_scaffolded_plugin_builds_and_loads_into_a_running_host_without_a_restart() {
    let host = Host::start(&[]);
    let dir = host
        .plugin_dir()
        .to_str()
        .expect("a UTF-8 temp path")
        .to_owned();
    stdout_of(
        &jobhost()
            .args(["new", "hello-cli", "--plugins", &dir])
            .output()
            .expect("jobhost new runs"),
    );

    let build = jobhost()
        .args(["build", "hello-cli", "--plugins", &dir])
        .env("CARGO_TARGET_DIR", fixtures_target_dir())
        .output()
        .expect("jobhost build runs");
    assert!(
        build.status.success(),
        "the scaffold builds as generated; stderr:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    host.wait_for_line(BUILD, |l| {
        l.contains("plugin loaded") && l.contains("hello_cli.wasm")
    });

    let enqueued =
        json_of(&host.cli(&["enqueue", "hello_cli.Greet", r#"{"name": "Ada"}"#, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && l.contains("job completed")
    });
}

#[test]
fn a_scaffolded_plugin_passes_its_own_native_tests_under_plain_cargo_test() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    stdout_of(
        &jobhost()
            .args(["new", "native-check", "--plugins"])
            .arg(dir.path())
            .output()
            .expect("jobhost new runs"),
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let test = std::process::Command::new(cargo)
        .args(["test", "--quiet", "--manifest-path"])
        .arg(dir.path().join("native-check/Cargo.toml"))
        .env("CARGO_TARGET_DIR", fixtures_target_dir())
        .output()
        .expect("cargo test runs");
    let stdout = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success(),
        "the scaffold's tests pass as generated; stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&test.stderr)
    );
    assert!(
        stdout.contains("2 passed"),
        "both generated tests ran:\n{stdout}"
    );
}

#[test]
fn a_scaffold_depends_on_the_sdk_that_sdk_names_and_refuses_a_path_that_is_none() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    let sdk = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk"))
        .expect("this checkout's SDK");
    stdout_of(
        &jobhost()
            .args(["new", "given-sdk", "--plugins"])
            .arg(dir.path())
            .arg("--sdk")
            .arg(&sdk)
            .output()
            .expect("jobhost new runs"),
    );
    let manifest = std::fs::read_to_string(dir.path().join("given-sdk/Cargo.toml"))
        .expect("the scaffold's manifest");
    assert!(
        manifest.contains(&format!("jobhost-sdk = {{ path = \"{}\" }}", sdk.display())),
        "{manifest}"
    );
    assert!(
        dir.path().join("given-sdk/Cargo.lock").is_file(),
        "the SDK's lockfile"
    );

    let none = dir.path().join("no-sdk-here");
    let refused = jobhost()
        .args(["new", "other", "--plugins"])
        .arg(dir.path())
        .arg("--sdk")
        .arg(&none)
        .output()
        .expect("jobhost new runs");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!("`{}` is not the jobhost SDK", none.display())),
        "{stderr}"
    );
    assert!(!dir.path().join("other").exists(), "nothing is scaffolded");
}
