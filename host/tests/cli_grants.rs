//! The grants file as an operator uses it: `jobhost run` reads `jobhost.toml` (or
//! `--config FILE`), `jobhost plugins` shows each plugin's grants without a secret's value,
//! an edit applies to the next jobs, a broken file is refused with its line while the
//! previous grants keep serving, and no log line shows a secret.

mod cli_support;
#[allow(dead_code, unreachable_pub)]
#[path = "outbound_support/pki.rs"]
mod pki;

use std::path::Path;

use cli_support::{Host, PROCESSING, STARTUP, jobhost, json_of, stdout_of};
use serde_json::json;
use tempfile::TempDir;

/// Secret values no output may show; unusual enough that no other text contains them.
const FILE_SECRET: &str = "s3cr3t-from-a-file-8f2c";
const ENV_SECRET: &str = "s3cr3t-from-the-env-51d9";

/// A plugin directory holding `http-probe`.
fn plugin_dir() -> TempDir {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("http-probe"),
        dir.path().join("http-probe.wasm"),
    )
    .expect("the fixture copies into the plugin directory");
    dir
}

/// Write `text` to `path` through a rename, as a deploy does, so the host never reads a
/// half-written file.
fn replace_file(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).expect("the staged file is written");
    std::fs::rename(&staged, path).expect("the file is renamed into place");
}

/// Enqueue `probe.Config` expecting `expect`, and wait for the job's outcome line.
fn check_config(host: &Host, expect: serde_json::Value) -> String {
    let payload = json!({ "expect": expect }).to_string();
    let enqueued = json_of(&host.cli(&["enqueue", "probe.Config", &payload, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(&job_id) && (l.contains("job completed") || l.contains("dead-letter"))
    })
}

#[test]
fn secrets_reach_the_guest_and_appear_in_no_log_line_and_no_admin_output() {
    let dir = plugin_dir();
    std::fs::create_dir(dir.path().join("secrets")).expect("a secrets directory");
    std::fs::write(dir.path().join("secrets/probe.key"), FILE_SECRET).expect("the secret file");
    let ca_pem = pki::Pki::new().ca_pem;
    std::fs::write(dir.path().join("secrets/ca.pem"), &ca_pem).expect("the CA file");
    std::fs::write(
        dir.path().join("jobhost.toml"),
        r#"[outbound]
ca_certificates = "secrets/ca.pem"
[plugins.http-probe]
allowed_outbound_hosts = ["https://hooks.example.com"]
max_concurrent_requests = 2
[plugins.http-probe.config]
endpoint = "https://hooks.example.com/hook"
[plugins.http-probe.secrets]
signing_key = { file = "secrets/probe.key" }
token = { env = "PROBE_TOKEN" }
"#,
    )
    .expect("the grants file");
    let mut command = jobhost();
    command
        .env("PROBE_TOKEN", ENV_SECRET)
        .env("RUST_LOG", "debug,wasmtime=warn,cranelift=warn")
        .arg("run")
        .arg("--plugins")
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);

    let ok = check_config(
        &host,
        json!({
            "endpoint": "https://hooks.example.com/hook",
            "signing_key": FILE_SECRET,
            "token": ENV_SECRET,
            "unknown": null,
        }),
    );
    assert!(
        ok.contains("job completed"),
        "the guest read every value: {ok}"
    );
    let wrong = check_config(&host, json!({"token": "not-the-token"}));
    assert!(
        wrong.contains("config keys not as expected: token"),
        "a mismatch is reported by key: {wrong}"
    );

    let plugins = json_of(&host.cli(&["plugins", "--json"]));
    let grants = &plugins[0]["grants"];
    assert_eq!(
        grants["allowed_outbound_hosts"],
        json!(["https://hooks.example.com"])
    );
    assert_eq!(grants["max_concurrent_requests"], 2);
    assert_eq!(grants["config_keys"], json!(["endpoint"]));
    assert_eq!(
        grants["secrets"],
        json!([
            {"key": "signing_key", "source": "file", "from": "secrets/probe.key"},
            {"key": "token", "source": "env", "from": "PROBE_TOKEN"},
        ])
    );
    assert_eq!(
        grants["ca_certificates"], "secrets/ca.pem",
        "the CA file is shown by its path as the file writes it"
    );
    let table = stdout_of(&host.cli(&["plugins"]));
    assert!(
        table.contains("https trusts the webpki roots and the CAs in secrets/ca.pem"),
        "{table}"
    );
    let ca_body = ca_pem
        .lines()
        .nth(1)
        .expect("a line of the certificate's base64");
    assert!(
        !plugins.to_string().contains(ca_body) && !table.contains(ca_body),
        "the admin output shows the CA file's path, not its contents"
    );
    assert!(
        table.contains("Grants: outbound to https://hooks.example.com")
            && table
                .contains("secrets: signing_key (file secrets/probe.key), token (env PROBE_TOKEN)"),
        "{table}"
    );
    for shown in [plugins.to_string(), table] {
        assert!(
            !shown.contains(FILE_SECRET) && !shown.contains(ENV_SECRET),
            "the admin output shows no secret value: {shown}"
        );
    }
    // Both jobs' outcome lines are in, so everything they logged is.
    assert!(
        host.log_lines()
            .iter()
            .all(|line| !line.contains(FILE_SECRET) && !line.contains(ENV_SECRET)),
        "no log line shows a secret value"
    );
}

#[test]
fn an_edited_grants_file_applies_to_the_next_jobs_and_a_broken_one_keeps_the_previous() {
    let dir = plugin_dir();
    let config_dir = tempfile::tempdir().expect("a config directory elsewhere");
    let file = config_dir.path().join("grants.toml");
    let grants =
        |greeting: &str| format!("[plugins.http-probe.config]\ngreeting = \"{greeting}\"\n");
    std::fs::write(&file, grants("one")).expect("the grants file");
    let mut command = jobhost();
    command
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .arg("--config")
        .arg(&file);
    let host = Host::spawn(command, dir, STARTUP);
    let first = check_config(&host, json!({"greeting": "one"}));
    assert!(first.contains("job completed"), "{first}");

    let before = host.line_count();
    replace_file(&file, &grants("two"));
    host.wait_for_line_after(before, PROCESSING, |l| l.contains("grants loaded"));
    let second = check_config(&host, json!({"greeting": "two"}));
    assert!(
        second.contains("job completed"),
        "the edit applies: {second}"
    );

    let before = host.line_count();
    replace_file(
        &file,
        "[plugins.http-probe]\nallowed_outbound_hosts = [\"nope\"]\n",
    );
    let refused =
        host.wait_for_line_after(before, PROCESSING, |l| l.contains("grants file refused"));
    assert!(
        refused.contains("grants.toml` line 2: allowed outbound host `nope`: it needs a scheme"),
        "the refusal names the file and the line: {refused}"
    );
    let third = check_config(&host, json!({"greeting": "two"}));
    assert!(
        third.contains("job completed"),
        "the previous grants keep serving: {third}"
    );
}

#[test]
fn a_broken_grants_file_at_start_is_refused_naming_its_line() {
    let dir = plugin_dir();
    std::fs::write(
        dir.path().join("jobhost.toml"),
        "[plugins.http-probe]\nmax_requests = 3\n",
    )
    .expect("the grants file");
    let output = jobhost()
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .args(["--admin", "127.0.0.1:0"])
        .output()
        .expect("jobhost runs");
    assert!(!output.status.success(), "the host does not start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("jobhost.toml` line 2: unknown field `max_requests`"),
        "{stderr}"
    );
}

/// A plugin directory holding the `http-probe` fixture as `file`, and a grants file
/// `grants.toml` holding `text` in a directory of its own.
fn deployed_as(file: &str, text: &str) -> (TempDir, TempDir) {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(jobhost_fixtures::wasm("http-probe"), dir.path().join(file))
        .expect("the fixture copies into the plugin directory");
    let config_dir = tempfile::tempdir().expect("a config directory elsewhere");
    std::fs::write(config_dir.path().join("grants.toml"), text).expect("the grants file");
    (dir, config_dir)
}

/// `jobhost run` on `dir`, its grants in `config_dir`'s `grants.toml`.
fn run_granted(dir: TempDir, config_dir: &TempDir) -> Host {
    let mut command = jobhost();
    command
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .arg("--config")
        .arg(config_dir.path().join("grants.toml"));
    Host::spawn(command, dir, STARTUP)
}

#[test]
fn a_plugin_named_after_another_gets_only_its_own_files_grants() {
    // `http-probe` reports the name `http-probe` in its manifest; the operator deployed it
    // as `innocent.wasm`.
    let (dir, config_dir) = deployed_as(
        "innocent.wasm",
        "[plugins.innocent.config]\nmine = \"ours\"\n\
         [plugins.http-probe.config]\nother_secret = \"theirs\"\n",
    );
    let host = run_granted(dir, &config_dir);
    let read = check_config(&host, json!({"other_secret": null, "mine": "ours"}));
    assert!(
        read.contains("job completed"),
        "the plugin reads its file's section and not the one its manifest names: {read}"
    );
    let unmatched = host.wait_for_line(STARTUP, |l| {
        l.contains("grants section matches no loaded plugin")
            && l.contains("section=\"http-probe\"")
    });
    assert!(
        unmatched.contains("grants.toml") && unmatched.contains("http-probe.wasm"),
        "the warning names the section, the grants file and the file it expects: {unmatched}"
    );
    let plugins = json_of(&host.cli(&["plugins", "--json"]));
    assert_eq!(
        plugins[0]["name"], "http-probe",
        "the manifest's name labels it"
    );
    assert_eq!(plugins[0]["binding"]["section"], "innocent");
    assert_eq!(plugins[0]["binding"]["pin"], "unpinned");
    assert_eq!(plugins[0]["grants"]["config_keys"], json!(["mine"]));
    let table = stdout_of(&host.cli(&["plugins"]));
    assert!(
        table.contains("Grants section: [plugins.innocent], by its file innocent.wasm; sha256 ")
            && table.contains("not pinned"),
        "{table}"
    );

    // A second file whose manifest claims the same name is refused; the first keeps serving.
    let before = host.line_count();
    let staged = host.plugin_dir().join("http-probe.staged");
    std::fs::copy(jobhost_fixtures::wasm("http-probe"), &staged).expect("the copy is staged");
    std::fs::rename(&staged, host.plugin_dir().join("http-probe.wasm")).expect("deployed");
    let refused = host.wait_for_line_after(before, PROCESSING, |l| l.contains("plugin refused"));
    assert!(
        refused.contains("claims the name of plugin `http-probe`")
            && refused.contains("http-probe.wasm)")
            && refused.contains("innocent.wasm)"),
        "the refusal names both files: {refused}"
    );
    let again = check_config(&host, json!({"other_secret": null, "mine": "ours"}));
    assert!(again.contains("job completed"), "{again}");
    assert_eq!(
        json_of(&host.cli(&["plugins", "--json"]))
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn a_pinned_section_grants_only_the_binary_it_pins() {
    use sha2::Digest as _;
    let wasm = std::fs::read(jobhost_fixtures::wasm("http-probe")).expect("the fixture");
    let actual: String = sha2::Sha256::digest(&wasm)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let other = "0".repeat(64);
    let pinned = |digest: &str, extra: &str| {
        format!(
            "[plugins.http-probe]\nsha256 = \"{digest}\"\n\
             [plugins.http-probe.config]\ngreeting = \"pinned\"\n{extra}"
        )
    };
    let (dir, config_dir) = deployed_as("http-probe.wasm", &pinned(&other, ""));
    let host = run_granted(dir, &config_dir);
    let warned = host.wait_for_line(STARTUP, |l| {
        l.contains("not the one its grants section pins")
    });
    assert!(
        warned.contains(&other) && warned.contains(&actual) && warned.contains("http-probe.wasm"),
        "the warning names the file, the pinned and the actual digest: {warned}"
    );
    let denied = check_config(&host, json!({"greeting": null}));
    assert!(
        denied.contains("job completed"),
        "another binary runs without its grants: {denied}"
    );
    let binding = &json_of(&host.cli(&["plugins", "--json"]))[0]["binding"];
    assert_eq!(binding["pin"], "mismatch");
    assert_eq!(binding["sha256"], actual.as_str());

    let before = host.line_count();
    replace_file(
        &config_dir.path().join("grants.toml"),
        &pinned(&actual, "[plugins.gone]\n"),
    );
    let gone = host.wait_for_line_after(before, PROCESSING, |l| {
        l.contains("grants section matches no loaded plugin")
    });
    assert!(gone.contains("gone.wasm"), "a reload warns too: {gone}");
    let granted = check_config(&host, json!({"greeting": "pinned"}));
    assert!(
        granted.contains("job completed"),
        "the binary it pins gets its grants: {granted}"
    );
    let binding = &json_of(&host.cli(&["plugins", "--json"]))[0]["binding"];
    assert_eq!(binding["pin"], "matches");
}
