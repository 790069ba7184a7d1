//! The process's CPU time, read from `/proc/self/stat`, and a stopwatch that reads it with
//! the wall clock.
//!
//! The RabbitMQ contenders run one at a time in this process, so the CPU the process spends
//! over a drain is what that consumer costs (plus the bench's own polling, every 2 ms).
//! `/proc` rather than `getrusage(2)` because the workspace denies `unsafe`; its resolution
//! is one clock tick (10 ms), under 1% of a full drain's CPU.

use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Clock ticks per second in `/proc/<pid>/stat`: `USER_HZ`, which Linux fixes at 100 for
/// this interface whatever the kernel's own tick rate.
const TICKS_PER_S: u64 = 100;

/// User plus system CPU time of this process so far, all threads included.
pub(crate) fn process_cpu() -> anyhow::Result<Duration> {
    read_stat("/proc/self/stat")
}

/// User plus system CPU time of process `pid` so far, all threads included (the black-box
/// scenario's consumers run in processes of their own).
pub(crate) fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    read_stat(&format!("/proc/{pid}/stat"))
}

/// The local broker's process, whose CPU a black-box drain also reads:
/// `JOBHOST_BENCH_BROKER_PID`, or the one process named `beam.smp` (RabbitMQ's Erlang VM)
/// when there is exactly one. `None` when the broker runs elsewhere or several nodes run
/// here (a cluster), where no one process is "the broker".
pub(crate) fn broker_pid() -> Option<u32> {
    if let Ok(pid) = std::env::var("JOBHOST_BENCH_BROKER_PID") {
        return pid.trim().parse().ok();
    }
    let beams: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "beam.smp")
        })
        .collect();
    match beams[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

fn read_stat(path: &str) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    parse_stat(&stat).with_context(|| format!("parsing {path}: {stat:?}"))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field
/// 2) is in parentheses and may hold spaces, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<Duration> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_secs(ticks / TICKS_PER_S) + Duration::from_millis(ticks % TICKS_PER_S * 10))
}

/// Wall-clock and CPU time since it was started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch {
    wall: Instant,
    cpu: Duration,
}

impl Stopwatch {
    pub(crate) fn start() -> anyhow::Result<Self> {
        Ok(Self {
            wall: Instant::now(),
            cpu: process_cpu()?,
        })
    }

    /// Wall-clock time since the start.
    pub(crate) fn elapsed(&self) -> Duration {
        self.wall.elapsed()
    }

    /// Wall-clock and CPU time since the start.
    pub(crate) fn read(&self) -> anyhow::Result<Spent> {
        Ok(Spent {
            wall: self.elapsed(),
            cpu: process_cpu()?.saturating_sub(self.cpu),
        })
    }
}

/// What a stopwatch read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spent {
    pub(crate) wall: Duration,
    /// The whole process's CPU time (user + system), all threads.
    pub(crate) cpu: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_utime_plus_stime_counted_after_the_last_parenthesis() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_stat(stat), Some(Duration::from_millis(3_800)));
    }

    #[test]
    fn the_process_cpu_time_grows_while_the_process_spins() {
        let before = process_cpu().expect("/proc/self/stat is readable");
        let spin = Instant::now();
        // Whole ticks only, and a loaded machine may not schedule the spin at once.
        while process_cpu().expect("/proc/self/stat is readable") <= before {
            assert!(
                spin.elapsed() < Duration::from_secs(10),
                "ten seconds of spinning added no CPU time"
            );
        }
    }
}
