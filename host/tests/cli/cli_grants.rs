//! The grants file as an operator uses it: `jobhost run` reads the user's
//! `~/.config/jobhost/jobhost.toml` (or `--config FILE`), never the plugin directory's,
//! `jobhost plugins` shows each plugin's grants without a secret's value, an edit applies
//! to the next jobs, a broken file is refused with its line while the previous grants keep
//! serving, and no log line shows a secret. The file must be the operator's own regular
//! file (a FIFO blocks neither the start nor SIGTERM), and no secret may name the host's
//! own credentials.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::support::cli::{
    Host, PROCESSING, STARTUP, jobhost, json_of, logged_id, mkfifo, stdout_of, wait_exit,
    write_grants,
};
use crate::support::outbound::pki;

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
    write_grants(&staged, text);
    std::fs::rename(&staged, path).expect("the file is renamed into place");
}

/// Enqueue `probe.Config` expecting `expect`, and wait for the job's outcome line.
fn check_config(host: &Host, expect: serde_json::Value) -> String {
    let payload = json!({ "expect": expect }).to_string();
    let enqueued = json_of(&host.cli(&["enqueue", "probe.Config", &payload, "--json"]));
    let job_id = enqueued["job_id"].as_str().expect("a job id").to_owned();
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(&job_id)) && (l.contains("job completed") || l.contains("dead-letter"))
    })
}

#[test]
fn secrets_reach_the_guest_and_appear_in_no_log_line_and_no_admin_output() {
    let dir = plugin_dir();
    std::fs::create_dir(dir.path().join("secrets")).expect("a secrets directory");
    std::fs::write(dir.path().join("secrets/probe.key"), FILE_SECRET).expect("the secret file");
    let ca_pem = pki::Pki::new().ca_pem;
    std::fs::write(dir.path().join("secrets/ca.pem"), &ca_pem).expect("the CA file");
    let grants_file = dir.path().join("jobhost.toml");
    write_grants(
        &grants_file,
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
    );
    let mut command = jobhost();
    command
        .env("PROBE_TOKEN", ENV_SECRET)
        .env("RUST_LOG", "debug,wasmtime=warn,cranelift=warn")
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .arg("--config")
        .arg(&grants_file);
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
    write_grants(&file, &grants("one"));
    let host = Host::spawn(run_with(&dir, &file), dir, STARTUP);
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
    let file = dir.path().join("jobhost.toml");
    write_grants(&file, "[plugins.http-probe]\nmax_requests = 3\n");
    let stderr = refused_start(run_with(&dir, &file));
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
    write_grants(&config_dir.path().join("grants.toml"), text);
    (dir, config_dir)
}

/// `jobhost run` on `dir`, its grants in `config_dir`'s `grants.toml`.
fn run_granted(dir: TempDir, config_dir: &TempDir) -> Host {
    let command = run_with(&dir, &config_dir.path().join("grants.toml"));
    Host::spawn(command, dir, STARTUP)
}

/// `jobhost run` of `dir` with the grants file `file`.
fn run_with(dir: &TempDir, file: &Path) -> Command {
    let mut command = jobhost();
    command
        .arg("run")
        .arg("--plugins")
        .arg(dir.path())
        .arg("--config")
        .arg(file);
    command
}

/// Run `command` (a host on a free port) expecting it to refuse to start within a bounded
/// wait; its stderr.
fn refused_start(mut command: Command) -> String {
    let mut child = command
        .args(["--admin", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jobhost starts");
    let status = wait_exit(&mut child, STARTUP);
    let _ = child.kill();
    let output = child.wait_with_output().expect("the host's output");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let status = status.unwrap_or_else(|| panic!("the host is still starting; stderr:\n{stderr}"));
    assert!(
        !status.success(),
        "the host does not start; stderr:\n{stderr}"
    );
    stderr
}

#[test]
fn without_config_the_grants_file_is_the_users_own_and_never_the_plugin_directorys() {
    let dir = plugin_dir();
    let greeting =
        |greeting: &str| format!("[plugins.http-probe.config]\ngreeting = \"{greeting}\"\n");
    write_grants(
        &dir.path().join("jobhost.toml"),
        &greeting("from the plugin directory"),
    );
    let config_home = tempfile::tempdir().expect("a configuration home");
    let xdg_file = config_home.path().join("jobhost/jobhost.toml");
    std::fs::create_dir(config_home.path().join("jobhost")).expect("its jobhost directory");
    write_grants(&xdg_file, &greeting("from the user's config"));
    let mut command = jobhost();
    command
        .env("XDG_CONFIG_HOME", config_home.path())
        .arg("run")
        .arg("--plugins")
        .arg(dir.path());
    let host = Host::spawn(command, dir, STARTUP);
    let loaded = host.wait_for_line(STARTUP, |l| l.contains("grants loaded"));
    assert!(
        loaded.contains(&xdg_file.display().to_string()),
        "the default is $XDG_CONFIG_HOME/jobhost/jobhost.toml: {loaded}"
    );
    let done = check_config(&host, json!({"greeting": "from the user's config"}));
    assert!(done.contains("job completed"), "{done}");

    // Without XDG_CONFIG_HOME, the file is under $HOME/.config; a broken one shows where.
    let home = tempfile::tempdir().expect("a home");
    std::fs::create_dir_all(home.path().join(".config/jobhost")).expect("its config directory");
    let home_file = home.path().join(".config/jobhost/jobhost.toml");
    write_grants(&home_file, "[plugins.http-probe]\nmax_requests = 3\n");
    let dir = plugin_dir();
    let mut command = jobhost();
    command
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", home.path())
        .arg("run")
        .arg("--plugins")
        .arg(dir.path());
    let stderr = refused_start(command);
    assert!(
        stderr.contains(&format!("`{}` line 2", home_file.display())),
        "{stderr}"
    );
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

#[test]
fn a_fifo_as_the_grants_file_holds_up_neither_the_start_nor_sigterm() {
    let dir = plugin_dir();
    let config_dir = tempfile::tempdir().expect("a config directory");
    let fifo = config_dir.path().join("fifo.toml");
    mkfifo(&fifo);
    let started = Instant::now();
    let stderr = refused_start(run_with(&dir, &fifo));
    assert!(
        stderr.contains(&format!(
            "cannot read `{}`: it is a FIFO, not a regular file; the host reads only regular files",
            fifo.display()
        )),
        "{stderr}"
    );
    eprintln!(
        "a FIFO as the grants file refused the start after {:?}",
        started.elapsed()
    );

    let file = config_dir.path().join("grants.toml");
    write_grants(&file, "[plugins.http-probe]\n");
    let mut host = Host::spawn(run_with(&dir, &file), dir, STARTUP);
    host.wait_for_line(STARTUP, |l| l.contains("watching the plugin directory"));
    let before = host.line_count();
    let staged = config_dir.path().join("staged");
    mkfifo(&staged);
    std::fs::rename(&staged, &file).expect("the FIFO is renamed into place");
    let refused =
        host.wait_for_line_after(before, PROCESSING, |l| l.contains("grants file refused"));
    assert!(refused.contains("it is a FIFO"), "{refused}");
    let stopping = Instant::now();
    let status = host.signal("TERM", Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean shutdown");
    eprintln!(
        "SIGTERM with a FIFO as the grants file: exited after {:?}",
        stopping.elapsed()
    );
}

#[test]
fn a_grants_file_open_to_others_or_linking_to_a_fifo_is_refused_naming_the_rule() {
    let dir = plugin_dir();
    let config_dir = tempfile::tempdir().expect("a config directory");
    let file = config_dir.path().join("grants.toml");
    write_grants(&file, "[plugins.http-probe]\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let stderr = refused_start(run_with(&dir, &file));
    assert!(
        stderr.contains(&format!(
            "cannot read `{}`: it is writable by group or others (mode 0666); a file that \
             grants must be writable by its owner only (`chmod go-w`)",
            file.display()
        )),
        "{stderr}"
    );

    let fifo = config_dir.path().join("fifo");
    mkfifo(&fifo);
    let link = config_dir.path().join("link.toml");
    std::os::unix::fs::symlink(&fifo, &link).expect("a link to the FIFO");
    let stderr = refused_start(run_with(&dir, &link));
    let target = std::fs::canonicalize(&fifo).expect("the FIFO's path");
    assert!(
        stderr.contains(&format!(
            "cannot read `{}`: it links to `{}`: it is a FIFO, not a regular file",
            link.display(),
            target.display()
        )),
        "{stderr}"
    );

    // Another user's file, where this test may give one away (as root, in CI containers).
    if effective_uid() == 0 {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let given = Command::new("chown")
            .arg("65534")
            .arg(&file)
            .status()
            .expect("chown runs");
        assert!(given.success(), "the file is given to user 65534");
        let stderr = refused_start(run_with(&dir, &file));
        assert!(
            stderr.contains("it belongs to user 65534, not to the host's user (0)"),
            "{stderr}"
        );
    }
}

/// This process's effective user id, from `/proc`.
fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok())
        .expect("an effective uid")
}

#[test]
fn a_secret_naming_the_admin_token_or_the_broker_password_is_refused() {
    let dir = plugin_dir();
    let private = tempfile::tempdir().expect("the host's own files");
    let token_file = private.path().join("admin.token");
    let password_file = private.path().join("amqp.password");
    std::fs::write(&password_file, "guest").expect("a password file");
    let cases = [
        (
            format!("stolen = {{ file = \"{}\" }}", token_file.display()),
            format!(
                "secret `stolen`: file `{}`: it is the admin token file; a plugin may not be \
                 given the host's own credentials",
                token_file.display()
            ),
        ),
        (
            "stolen = { env = \"JOBHOST_AMQP_PASSWORD\" }".to_owned(),
            "secret `stolen`: environment variable `JOBHOST_AMQP_PASSWORD`: it is the broker's \
             password; a plugin may not be given the host's own credentials"
                .to_owned(),
        ),
        (
            format!("stolen = {{ file = \"{}\" }}", password_file.display()),
            "it is the broker's password file".to_owned(),
        ),
    ];
    for (secret, refusal) in cases {
        let file = private.path().join("grants.toml");
        write_grants(&file, &format!("[plugins.http-probe.secrets]\n{secret}\n"));
        let mut command = run_with(&dir, &file);
        command
            .env("JOBHOST_AMQP_PASSWORD", "guest")
            .arg("--admin-token-file")
            .arg(&token_file)
            .arg("--amqp-password-file")
            .arg(&password_file);
        let stderr = refused_start(command);
        assert!(stderr.contains(&refusal), "{secret}: {stderr}");
    }
}

/// The README's "Periodic jobs" section, as a user follows it: its `toml` block in the
/// grants file, a host started on it, and `jobhost schedules`.
#[test]
fn the_readme_schedule_is_listed_by_jobhost_schedules_with_its_next_tick() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("the README reads");
    let section = readme
        .split("## Periodic jobs")
        .nth(1)
        .expect("the README has a Periodic jobs section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section shows a toml block");
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    let grants_file = dir.path().join("jobhost.toml");
    write_grants(&grants_file, block);
    let host = Host::spawn(run_with(&dir, &grants_file), dir, STARTUP);
    let table = stdout_of(&host.cli(&["schedules"]));
    assert!(
        table.contains("nightly-report")
            && table.contains("reports.Nightly")
            && table.contains("cron `0 3 * * *` in Europe/Paris"),
        "{table}"
    );
    let listed = json_of(&host.cli(&["schedules", "--json"]));
    let schedule = &listed[0];
    assert_eq!(schedule["missed"], "catch_up 3", "{schedule}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let next_ms = schedule["next_ms"].as_i64().expect("a next tick");
    assert!(
        next_ms > now_ms && next_ms - now_ms <= 25 * 3_600_000,
        "the next 03:00 in Paris is within a day: {schedule}"
    );
}

/// A schedule a plugin declares (`email.DailyDigest` of the example `email-sender`), as an
/// operator sees it and overrides it: listed from the plugin with its next tick, then
/// disabled by a `[schedules."email.DailyDigest"]` section, without a rebuild or a restart.
#[test]
fn a_schedule_a_plugin_declares_is_listed_from_the_plugin_and_the_grants_file_can_disable_it() {
    let dir = tempfile::tempdir().expect("a temp plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("email-sender"),
        dir.path().join("email-sender.wasm"),
    )
    .expect("the example copies into the plugin directory");
    let grants_file = dir.path().join("jobhost.toml");
    write_grants(&grants_file, "");
    let host = Host::spawn(run_with(&dir, &grants_file), dir, STARTUP);
    let digest = |host: &Host| {
        let listed = json_of(&host.cli(&["schedules", "--json"]));
        listed
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == "email.DailyDigest"))
            .cloned()
            .unwrap_or_default()
    };
    let declared = digest(&host);
    assert_eq!(declared["from"], "plugin email-sender", "{declared}");
    assert_eq!(declared["job_type"], "email.DailyDigest");
    assert_eq!(declared["cron"], "0 7 * * *");
    assert_eq!(declared["tz"], "Europe/Paris");
    assert_eq!(declared["enabled"], true);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let next_ms = declared["next_ms"].as_i64().expect("a next tick");
    assert!(
        next_ms > now_ms && next_ms - now_ms <= 25 * 3_600_000,
        "the next 07:00 in Paris is within a day: {declared}"
    );
    let table = stdout_of(&host.cli(&["schedules"]));
    assert!(
        table.contains("plugin email-sender") && table.contains("cron `0 7 * * *` in Europe/Paris"),
        "{table}"
    );

    replace_file(
        &grants_file,
        "[schedules.\"email.DailyDigest\"]\njob_type = \"email.DailyDigest\"\n\
         cron = \"0 7 * * *\"\ntz = \"Europe/Paris\"\nenabled = false\n",
    );
    let deadline = Instant::now() + PROCESSING;
    let overridden = loop {
        let listed = digest(&host);
        if listed["enabled"] == false || Instant::now() > deadline {
            break listed;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(overridden["enabled"], false, "{overridden}");
    assert_eq!(
        overridden["from"],
        "[schedules.\"email.DailyDigest\"] in jobhost.toml"
    );
}
