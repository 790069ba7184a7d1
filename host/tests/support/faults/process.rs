//! A `jobhost run` process on the test broker: its log lines collected, every wait
//! bounded, stopped by SIGTERM or SIGKILLed on demand, SIGKILLed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ledger::LedgerQueues;

/// Jobs a host runs at once.
pub(crate) const CONCURRENCY: usize = 8;
/// How long a host may take to compile its plugins (a debug cranelift) and consume.
const STARTUP: Duration = Duration::from_secs(120);

/// A running `jobhost run --amqp`.
#[derive(Debug)]
pub(crate) struct HostProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl HostProcess {
    /// Start a host on plugin directory `dir`, on the broker and virtual host of `ledger`,
    /// once it consumes the ledger's queues.
    pub(crate) async fn start(dir: &Path, ledger: &LedgerQueues) -> Self {
        Self::start_on(dir, &[&ledger.url], &[ledger.work, ledger.done]).await
    }

    /// Start a host on plugin directory `dir` with one `--amqp` per item of `amqp` (a URL or
    /// a comma list of nodes), once it consumes each of `queues`.
    pub(crate) async fn start_on(dir: &Path, amqp: &[&str], queues: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_jobhost"))
            .args(["run", "--admin", "127.0.0.1:0"])
            .args(amqp.iter().flat_map(|url| ["--amqp", url]))
            .arg("--concurrency")
            .arg(CONCURRENCY.to_string())
            .arg("--plugins")
            .arg(dir)
            .env("RUST_LOG", "info,wasmtime=warn,cranelift=warn,lapin=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("jobhost starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("the log lock").push(line);
            }
        });
        let host = Self { child, lines };
        for queue in queues {
            let consuming = format!("queue={queue} ");
            host.wait_for_line(0, STARTUP, |l| {
                l.contains("consuming") && l.contains(&consuming)
            })
            .await;
        }
        host
    }

    /// SIGKILL: no shutdown, no grace period, whatever was in flight stays unacked.
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("SIGKILL is delivered");
        self.child.wait().expect("the killed host is reaped");
    }

    /// SIGTERM, as a service manager stops a host, and wait at most `limit` for the exit.
    pub(crate) async fn terminate(&mut self, limit: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIGTERM is delivered");
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("the host's status") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the host did not exit within {limit:?} of SIGTERM; the log's tail:\n{}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The host's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many lines after the first `skip` match `wanted`.
    pub(crate) fn lines_since(&self, skip: usize, wanted: impl Fn(&str) -> bool) -> usize {
        let lines = self.lines.lock().expect("the log lock");
        lines.iter().skip(skip).filter(|l| wanted(l)).count()
    }

    /// How many jobs the host's summary lines say it completed so far.
    // Read by `cluster_faults.rs`, which shares this file; the fault suite has no use for it.
    pub(crate) fn completions(&self) -> u64 {
        self.sum_of("jobs settled since the last summary", "completed=")
    }

    /// How many held messages the host released itself because the broker kept them past
    /// their delay (the hold-queue sweeper's warnings).
    pub(crate) fn released_overdue(&self) -> u64 {
        self.sum_of("past their delay", "released=")
    }

    /// The sum of the numbers after `field` in the lines that contain `marker`.
    fn sum_of(&self, marker: &str, field: &str) -> u64 {
        let lines = self.lines.lock().expect("the log lock");
        lines
            .iter()
            .filter(|l| l.contains(marker))
            .filter_map(|l| {
                let (_, after) = l.split_once(field)?;
                after.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }

    /// How many lines the host logged so far.
    pub(crate) fn line_count(&self) -> usize {
        self.lines.lock().expect("the log lock").len()
    }

    /// The first line after the first `skip` that matches `wanted`; fails with the log's
    /// tail after `limit`.
    pub(crate) async fn wait_for_line(
        &self,
        skip: usize,
        limit: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let found = self
                .lines
                .lock()
                .expect("the log lock")
                .iter()
                .skip(skip)
                .find(|l| wanted(l))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no matching host log line within {limit:?}; the log's tail:\n{}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last `count` lines that `wanted` picks, joined.
    pub(crate) fn last_matching(&self, count: usize, wanted: impl Fn(&str) -> bool) -> String {
        let lines = self.lines.lock().expect("the log lock");
        let picked: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| wanted(l))
            .collect();
        picked[picked.len().saturating_sub(count)..].join("\n")
    }

    /// The host's last 40 log lines.
    pub(crate) fn tail(&self) -> String {
        let lines = self.lines.lock().expect("the log lock");
        let start = lines.len().saturating_sub(40);
        lines[start..].join("\n")
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
