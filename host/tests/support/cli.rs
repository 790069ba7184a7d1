//! Driving the real `jobhost` binary: a host process on the memory backend with a temp
//! plugin directory, its log lines (stdout and stderr) collected, and the client commands
//! run against it. Every wait is bounded; the host is killed when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a host may take to load its plugins and listen.
pub const STARTUP: Duration = Duration::from_secs(60);
/// How long a job may take to show up in the log.
pub const PROCESSING: Duration = Duration::from_secs(30);

/// How a console log line names a job: the first 8 hex digits of its id.
pub fn logged_id(job_id: &str) -> &str {
    job_id.get(..8).unwrap_or(job_id)
}

/// The binary under test, with an environment that cannot point it elsewhere: no broker
/// URL (CI exports one), no admin address, our own log filter, and the user's cache, state
/// and configuration directories (compiled plugins, admin tokens, the default grants file)
/// under the test target directory.
pub fn jobhost() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jobhost"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    command
        .env_remove("AMQP_URL")
        .env_remove("JOBHOST_ADMIN")
        .env_remove("JOBHOST_ADMIN_TOKEN_FILE")
        .env_remove("JOBHOST_CACHE_DIR")
        .env_remove("JOBHOST_AMQP_PASSWORD")
        .env("XDG_CACHE_HOME", tmp.join("xdg-cache"))
        .env("XDG_STATE_HOME", tmp.join("xdg-state"))
        .env("XDG_CONFIG_HOME", tmp.join("xdg-config"))
        .env(
            "RUST_LOG",
            "info,jobhost::worker=debug,wasmtime=warn,cranelift=warn",
        )
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// The log lines of a child, shared with the thread that reads them.
#[derive(Debug, Clone, Default)]
struct Lines(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Lines {
    fn follow(&self, stream: impl std::io::Read + Send + 'static) {
        let lines = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let (store, changed) = &*lines.0;
                store.lock().expect("the log lock").push(line);
                changed.notify_all();
            }
        });
    }

    fn all(&self) -> Vec<String> {
        self.0.0.lock().expect("the log lock").clone()
    }

    /// The first line matching `wanted` (counting from `skip`), waiting at most `timeout`.
    fn wait(
        &self,
        skip: usize,
        timeout: Duration,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (store, changed) = &*self.0;
        let mut lines = store.lock().expect("the log lock");
        loop {
            if let Some(line) = lines.iter().skip(skip).find(|l| wanted(l)) {
                return Some(line.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            lines = changed.wait_timeout(lines, left).expect("the log lock").0;
        }
    }
}

/// A `jobhost run` process.
#[derive(Debug)]
pub struct Host {
    child: Child,
    lines: Lines,
    /// The admin API's address, read from the log.
    pub admin: String,
    /// The plugin directory (of `start`), or the directory `dev` runs in.
    pub dir: TempDir,
}

impl Host {
    /// `jobhost run` on a temp plugin directory holding these fixtures, once its admin API
    /// listens.
    pub fn start(fixtures: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temp plugin directory");
        for name in fixtures {
            std::fs::copy(
                jobhost_fixtures::wasm(name),
                dir.path().join(format!("{name}.wasm")),
            )
            .expect("the fixture copies into the plugin directory");
        }
        let mut command = jobhost();
        command.arg("run").arg("--plugins").arg(dir.path());
        Self::spawn(command, dir, STARTUP)
    }

    /// `jobhost run --amqp URL` on a temp plugin directory holding `fixture`, with the
    /// grants file `config` when there is one, once its admin API listens; from a test on
    /// a multi-threaded runtime.
    pub fn on_broker(fixture: &str, url: &str, config: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().expect("a temp plugin directory");
        std::fs::copy(
            jobhost_fixtures::wasm(fixture),
            dir.path().join(format!("{fixture}.wasm")),
        )
        .expect("the fixture copies into the plugin directory");
        let mut command = jobhost();
        command
            .args(["run", "--amqp", url, "--plugins"])
            .arg(dir.path());
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        tokio::task::block_in_place(|| Self::spawn(command, dir, STARTUP))
    }

    /// Spawn `command` (`run` or `dev` with its arguments) with a free admin port and a
    /// small pool, and wait at most `startup` for its admin API to listen. `dir` is kept
    /// as long as the host runs.
    pub fn spawn(mut command: Command, dir: TempDir, startup: Duration) -> Self {
        let mut child = command
            .args(["--admin", "127.0.0.1:0", "--concurrency", "4"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("jobhost starts");
        let lines = Lines::default();
        lines.follow(child.stdout.take().expect("stdout is piped"));
        lines.follow(child.stderr.take().expect("stderr is piped"));
        let mut host = Self {
            child,
            lines,
            admin: String::new(),
            dir,
        };
        let listening =
            host.wait_for_line(startup, |l| l.contains("admin API listening on http://"));
        host.admin = listening
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the log names the admin address")
            .to_owned();
        host
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The plugin directory's path.
    pub fn plugin_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The first log line matching `wanted`, panicking with the whole log after `timeout`.
    pub fn wait_for_line(&self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> String {
        self.wait_for_line_after(0, timeout, wanted)
    }

    /// Like [`Host::wait_for_line`], ignoring the first `skip` lines.
    pub fn wait_for_line_after(
        &self,
        skip: usize,
        timeout: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        self.lines.wait(skip, timeout, &wanted).unwrap_or_else(|| {
            panic!(
                "no matching host log line within {timeout:?}; the log:\n{}",
                self.lines.all().join("\n")
            )
        })
    }

    /// The admin token file, as the host's log names it (`admin token written file=...`).
    pub fn token_file(&self) -> PathBuf {
        let line = self.wait_for_line(STARTUP, |l| l.contains("admin token written"));
        let file = line
            .split("file=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the log names the token file");
        PathBuf::from(file)
    }

    /// The admin token, read from its file as the client commands do.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.token_file())
            .expect("the token file is readable")
            .trim()
            .to_owned()
    }

    /// Every line the host logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.lines.all()
    }

    /// How many lines the host logged so far.
    pub fn line_count(&self) -> usize {
        self.lines.all().len()
    }

    /// `jobhost run --plugins plugins --config jobhost.toml ARGS` in the project directory
    /// `dir`, as a user types it there, once its admin API listens.
    pub fn in_project(dir: TempDir, args: &[&str]) -> Self {
        let mut command = jobhost();
        command
            .current_dir(dir.path())
            .args(["run", "--plugins", "plugins", "--config", "jobhost.toml"])
            .args(args);
        Self::spawn(command, dir, STARTUP)
    }

    /// Run `jobhost ARGS --admin <this host>` to completion in `dir`, as a user in their
    /// project directory; its stdout, failing the test with its stderr if it fails.
    pub fn cli_ok_in(&self, dir: &Path, args: &[&str]) -> String {
        let output = jobhost()
            .current_dir(dir)
            .args(args)
            .args(["--admin", &self.admin])
            .output()
            .expect("the jobhost client runs");
        assert!(
            output.status.success(),
            "`jobhost {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        stdout_of(&output)
    }

    /// Run `jobhost ARGS --admin <this host>` to completion.
    pub fn cli(&self, args: &[&str]) -> Output {
        jobhost()
            .args(args)
            .args(["--admin", &self.admin])
            .output()
            .expect("the jobhost client runs")
    }

    /// Send SIGINT, as Ctrl-C does, and wait at most `timeout` for the exit.
    pub fn interrupt(&mut self, timeout: Duration) -> ExitStatus {
        self.signal("INT", timeout)
    }

    /// Send SIG`name` (`INT`, `TERM`) and wait at most `timeout` for the exit.
    pub fn signal(&mut self, name: &str, timeout: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIG{name} is delivered");
        wait_exit(&mut self.child, timeout).unwrap_or_else(|| {
            panic!(
                "the host did not exit within {timeout:?} of SIG{name}; the log:\n{}",
                self.lines.all().join("\n")
            )
        })
    }

    /// The host's resident memory now, in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the host's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmRSS line")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait for a line of `host` containing every one of `parts`, from a test on tokio's
/// multi-threaded runtime.
pub fn logs(host: &Host, within: Duration, parts: &[&str]) -> String {
    logs_after(host, 0, within, parts)
}

/// [`logs`], ignoring the first `skip` lines: what `host` said since then.
pub fn logs_after(host: &Host, skip: usize, within: Duration, parts: &[&str]) -> String {
    tokio::task::block_in_place(|| {
        host.wait_for_line_after(skip, within, |l| parts.iter().all(|part| l.contains(part)))
    })
}

/// The whole answer to `GET path` with the extra `headers` from the admin API at `addr`.
pub fn http_get(addr: &str, path: &str, headers: &[&str]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(PROCESSING))
        .expect("a read timeout");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("an answer in time");
    answer
}

/// The exit status of `child` within `timeout`, `None` if it is still running then.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Make a FIFO at `path`, which nobody will write.
pub fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "a FIFO at {}", path.display());
}

/// A sparse file of `bytes` at `path`: it takes no disk, and reading it whole would take
/// `bytes` of memory.
pub fn sparse_file(path: &Path, bytes: u64) {
    std::fs::File::create(path)
        .and_then(|file| file.set_len(bytes))
        .expect("a sparse file");
}

/// Write `text` to `path` as the operator's own grants file: readable by others, writable
/// by its owner only, whatever the umask.
pub fn write_grants(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).expect("the grants file is written");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .expect("the grants file's mode");
}

/// stdout of a command that must have succeeded.
pub fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "the command succeeds; status {}, stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The JSON a `--json` command printed.
pub fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout_of(output)).expect("--json prints JSON")
}

/// Where the repository's target directory is: the fixtures live in `<target>/plugins`.
pub fn fixtures_target_dir() -> PathBuf {
    jobhost_fixtures::dir()
        .parent()
        .expect("the fixtures directory has a parent")
        .to_owned()
}
