//! A consumer process under measurement: how it is started, how its drain is seen to end,
//! how it is stopped.
//!
//! # Contract
//! - The start sample is taken when the queue's depth first drops below the jobs it was
//!   filled with: the consumer has taken its first deliveries, so its startup (connecting,
//!   compiling the plugin, declaring) is not counted.
//! - The end sample is taken when the queue is empty and the consumer has completed every
//!   job by its own count: `jobhost_jobs_total{outcome="completed"}` on `jobhost run`'s
//!   `/metrics`, the child's [`DRAINED`] line.
//! - A sample is the wall clock and the process's user + system CPU from
//!   `/proc/<pid>/stat`, all threads; and, where the broker runs on this machine, the
//!   broker's CPU the same way, so a drain also says what it cost the broker.
//! - Stopping is `SIGTERM`; `jobhost run` drains gracefully and must exit 0, a child dies
//!   of the signal. A process left behind by an error is killed when its handle drops.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout, Command};

use crate::cpu::{Spent, cpu_of};

use super::DEADLINE;
use super::consumer::DRAINED;

/// How long a consumer may take from its start to its first delivery: a first
/// `jobhost run` compiles the plugin.
const STARTUP: Duration = Duration::from_secs(120);

/// How often the queue's depth and the host's count are read: often enough to be within 1%
/// of a full drain, seldom enough not to load the broker the consumer shares a machine with.
const POLL: Duration = Duration::from_millis(5);

/// How long a stopped consumer may take to exit.
const STOP: Duration = Duration::from_secs(30);

/// The most of `/metrics` read: the host's families for one queue are a few KiB.
const METRICS_LIMIT: u64 = 1 << 20;

/// How a consumer says it has completed every job.
pub(super) enum Completion {
    /// `jobhost run`'s admin API.
    Metrics(SocketAddr),
    /// A child's stdout, where [`DRAINED`] comes.
    Line(tokio::io::Lines<BufReader<ChildStdout>>),
}

/// What a drain cost, from its first delivery to its last completion.
pub(super) struct Measured {
    /// The consumer's wall clock and CPU.
    pub(super) consumer: Spent,
    /// The broker's CPU over the same span, where its process is known.
    pub(super) broker_cpu: Option<Duration>,
}

/// A started consumer process.
pub(super) struct Consumer {
    child: Child,
    pid: u32,
    completion: Completion,
    /// Where its stderr goes, for the error when it fails; `None` when inherited.
    log: Option<PathBuf>,
}

impl Consumer {
    /// Start `command` (stdout piped when `completion` is a line, killed when dropped).
    pub(super) fn spawn(
        mut command: Command,
        metrics: Option<SocketAddr>,
        log: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        command.kill_on_drop(true).stdin(Stdio::null());
        command.stdout(if metrics.is_some() {
            Stdio::null()
        } else {
            Stdio::piped()
        });
        if let Some(log) = &log {
            command.stderr(std::fs::File::create(log)?);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let pid = child.id().context("a child just spawned has a pid")?;
        let completion = match metrics {
            Some(admin) => Completion::Metrics(admin),
            None => {
                let stdout = child.stdout.take().context("stdout is piped")?;
                Completion::Line(BufReader::new(stdout).lines())
            }
        };
        Ok(Self {
            child,
            pid,
            completion,
            log,
        })
    }

    /// The process's id.
    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// The wall clock, the process's CPU and `broker`'s CPU now.
    fn sample(&self, broker: Option<u32>) -> anyhow::Result<(Instant, Duration, Option<Duration>)> {
        let broker_cpu = broker.map(cpu_of).transpose()?;
        Ok((Instant::now(), cpu_of(self.pid)?, broker_cpu))
    }

    /// Wait for the drain of `jobs` jobs from `queue` and return what it cost the consumer
    /// and the `broker` process, from the first delivery to the last completion.
    pub(super) async fn measure(
        &mut self,
        depth: &Depth,
        queue: &str,
        jobs: usize,
        broker: Option<u32>,
    ) -> anyhow::Result<Measured> {
        let jobs_u32 = u32::try_from(jobs)?;
        self.poll_until(depth, queue, STARTUP, |ready| ready < jobs_u32)
            .await
            .context("waiting for the consumer's first delivery")?;
        let (started, cpu_at_start, broker_at_start) = self.sample(broker)?;
        self.poll_until(depth, queue, DEADLINE, |ready| ready == 0)
            .await
            .context("waiting for the queue to empty")?;
        self.completed(jobs as u64).await?;
        let (ended, cpu_at_end, broker_at_end) = self.sample(broker)?;
        Ok(Measured {
            consumer: Spent {
                wall: ended - started,
                cpu: cpu_at_end.saturating_sub(cpu_at_start),
            },
            broker_cpu: broker_at_start
                .zip(broker_at_end)
                .map(|(start, end)| end.saturating_sub(start)),
        })
    }

    /// Poll `queue`'s depth until `done` holds, failing if the process exits first.
    async fn poll_until(
        &mut self,
        depth: &Depth,
        queue: &str,
        deadline: Duration,
        done: impl Fn(u32) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let ready = depth.ready(queue).await?;
            if done(ready) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(self.failure(status));
            }
            anyhow::ensure!(
                start.elapsed() < deadline,
                "{ready} messages still ready in `{queue}` after {deadline:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Wait until the consumer has completed `jobs` jobs by its own count.
    async fn completed(&mut self, jobs: u64) -> anyhow::Result<()> {
        let start = Instant::now();
        match &mut self.completion {
            Completion::Line(lines) => {
                let line = tokio::time::timeout(DEADLINE, lines.next_line())
                    .await
                    .context("the consumer never said it had drained")??;
                anyhow::ensure!(
                    line.as_deref() == Some(DRAINED),
                    "the consumer said {line:?} instead of `{DRAINED}`"
                );
            }
            Completion::Metrics(admin) => loop {
                let done = completed_jobs(*admin).await?;
                if done >= jobs {
                    break;
                }
                anyhow::ensure!(
                    start.elapsed() < DEADLINE,
                    "the host completed only {done} of {jobs} jobs within {DEADLINE:?}"
                );
                tokio::time::sleep(POLL).await;
            },
        }
        Ok(())
    }

    /// `SIGTERM`, then wait for the exit; `graceful` asks for exit code 0, else dying of
    /// the signal is as good.
    pub(super) async fn stop(mut self, graceful: bool) -> anyhow::Result<()> {
        let signalled = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await
            .context("running kill(1)")?;
        anyhow::ensure!(signalled.success(), "kill -TERM {} failed", self.pid);
        let status = tokio::time::timeout(STOP, self.child.wait())
            .await
            .with_context(|| format!("the consumer did not exit within {STOP:?} of SIGTERM"))??;
        let expected = status.success() || (!graceful && status.signal() == Some(15));
        if expected {
            Ok(())
        } else {
            Err(self.failure(status))
        }
    }

    /// The error for an exit with `status`, with the end of the process's log.
    fn failure(&self, status: ExitStatus) -> anyhow::Error {
        let tail = self
            .log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .map(|log| {
                let lines: Vec<&str> = log.lines().rev().take(20).collect();
                lines.into_iter().rev().collect::<Vec<_>>().join("\n")
            })
            .unwrap_or_default();
        anyhow::anyhow!("the consumer exited with {status}:\n{tail}")
    }
}

/// Reads a queue's depth on a channel of its own.
pub(super) struct Depth {
    channel: lapin::Channel,
}

impl Depth {
    pub(super) async fn open(connection: &lapin::Connection) -> anyhow::Result<Self> {
        Ok(Self {
            channel: connection.create_channel().await?,
        })
    }

    /// Messages ready in `queue` (delivered but unacked ones are not counted).
    pub(super) async fn ready(&self, queue: &str) -> anyhow::Result<u32> {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let declared = self
            .channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
            .with_context(|| format!("reading the depth of `{queue}`"))?;
        Ok(declared.message_count())
    }
}

/// Completed jobs by the host at `admin`: the sum of its `jobhost_jobs_total` series with
/// `outcome="completed"`.
pub(super) async fn completed_jobs(admin: SocketAddr) -> anyhow::Result<u64> {
    let mut stream = TcpStream::connect(admin).await?;
    // HTTP/1.0: the server closes the connection after the answer, which ends the read.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream
        .take(METRICS_LIMIT)
        .read_to_string(&mut answer)
        .await?;
    anyhow::ensure!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "GET /metrics answered {:?}",
        answer.lines().next()
    );
    Ok(sum_completed(&answer))
}

/// The sum of the `jobhost_jobs_total` series of `metrics` whose outcome is `completed`.
fn sum_completed(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("jobhost_jobs_total{") && line.contains(r#"outcome="completed""#)
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        // Counters are whole numbers written as such; the cast only drops a `.0`.
        .map(|value| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let whole = value as u64;
            whole
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_jobs_sum_every_completed_series_and_nothing_else() {
        let metrics = concat!(
            "# TYPE jobhost_jobs_total counter\n",
            "jobhost_jobs_total{queue=\"q\",job_type=\"a\",outcome=\"completed\"} 7\n",
            "jobhost_jobs_total{queue=\"q\",job_type=\"b\",outcome=\"completed\"} 3\n",
            "jobhost_jobs_total{queue=\"q\",job_type=\"a\",outcome=\"retried\"} 100\n",
            "jobhost_jobs_in_flight 5\n",
        );
        assert_eq!(sum_completed(metrics), 10);
    }
}
