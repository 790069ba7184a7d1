//! Short jobs run inside their queue's consume loop; long ones get a task of their own.
//!
//! A task per delivery cost a no-op job on RabbitMQ about a seventh of the host's CPU: the
//! spawn, and above all the wake of a second runtime thread to steal the task, which then
//! sleeps again (BENCHMARKS.md, "Short jobs in the consume loop"). So the consume
//! loop polls each new delivery once itself, and spawns it only if that poll did not finish
//! it: the job waits on I/O, a publish confirm or a backoff, or its guest yielded at an
//! epoch tick.
//!
//! # Contract
//! - The loop polls a delivery inline only where the backend gives an
//!   [inline limit](crate::broker::Backend::inline_limit) and the queue's jobs have lately
//!   kept a thread busy for at most that long each ([`BusyTime`]: a mean over recent jobs
//!   of the time spent inside their polls, waiting excluded). Longer jobs are spawned from
//!   the start, so a CPU-heavy plugin keeps every runtime thread, as before.
//! - An inline poll holds up the queue's consumption for at most one stretch of the job:
//!   until it completes, waits, or its guest reaches the engine's next epoch tick, where it
//!   yields; what is left then runs as a task.
//! - A job polled inline keeps its slot of the worker's concurrency while it runs, as a
//!   spawned one does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The weight of the newest job in [`BusyTime`]'s mean: one job in eight.
const NEWEST_SHARE: u64 = 8;

/// How long a queue's recent jobs kept a thread busy: an exponentially weighted mean,
/// shared by the consume loop and the tasks of its jobs, against the backend's limit.
#[derive(Debug, Clone)]
pub(super) struct BusyTime {
    mean: Arc<AtomicU64>,
    limit: Option<Duration>,
}

impl BusyTime {
    /// A queue with no jobs yet, on a backend whose inline limit is `limit`.
    pub(super) fn new(limit: Option<Duration>) -> Self {
        Self {
            mean: Arc::default(),
            limit,
        }
    }

    /// Whether the next job is likely short enough to poll inline.
    pub(super) fn is_short(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.mean.load(Ordering::Relaxed) <= nanos(limit))
    }

    /// Whether a job busy for `busy` so far is already longer than inline jobs may be.
    fn is_past_limit(&self, busy: Duration) -> bool {
        self.limit.is_some_and(|limit| busy > limit)
    }

    fn record(&self, busy: Duration) {
        let busy = nanos(busy);
        // Relaxed and a lost update now and then are fine: this is a hint, not a count.
        let mean = self.mean.load(Ordering::Relaxed);
        let mean = mean - mean / NEWEST_SHARE + busy / NEWEST_SHARE;
        self.mean.store(mean, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn mean(&self) -> Duration {
        Duration::from_nanos(self.mean.load(Ordering::Relaxed))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A job that adds up the time spent in its polls and reports it to [`BusyTime`] once:
/// when it completes, or sooner, when it is left pending after being busy longer than the
/// limit, so that a guest spinning until its timeout turns its queue to spawning at its
/// first epoch tick, not at its timeout. A job dropped unfinished before either says
/// nothing about the next.
pub(super) struct Timed<F> {
    job: F,
    busy: Duration,
    report: Option<BusyTime>,
}

impl<F> Timed<F> {
    pub(super) fn new(job: F, report: BusyTime) -> Self {
        Self {
            job,
            busy: Duration::ZERO,
            report: Some(report),
        }
    }
}

impl<F: Future<Output = ()> + Unpin> Future for Timed<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let start = Instant::now();
        let poll = Pin::new(&mut self.job).poll(cx);
        self.busy += start.elapsed();
        let busy = self.busy;
        if let Some(report) = self
            .report
            .take_if(|report| poll.is_ready() || report.is_past_limit(busy))
        {
            report.record(busy);
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_micros(50);

    fn limited() -> BusyTime {
        BusyTime::new(Some(LIMIT))
    }

    #[test]
    fn a_backend_without_a_limit_never_runs_a_job_inline() {
        let busy = BusyTime::new(None);
        assert!(!busy.is_short());
        busy.record(Duration::ZERO);
        assert!(!busy.is_short());
    }

    #[test]
    fn a_queue_starts_short_and_stays_short_while_its_jobs_are() {
        let busy = limited();
        assert!(busy.is_short());
        for _ in 0..100 {
            busy.record(Duration::from_micros(15));
        }
        assert!(busy.is_short());
        assert!(busy.mean() <= Duration::from_micros(15));
    }

    #[test]
    fn one_long_job_makes_the_next_ones_spawn_until_short_ones_bring_the_mean_back() {
        let busy = limited();
        for _ in 0..100 {
            busy.record(Duration::from_micros(10));
        }
        busy.record(Duration::from_micros(700));
        assert!(!busy.is_short(), "mean {:?}", busy.mean());
        let mut spawned = 0;
        while !busy.is_short() {
            busy.record(Duration::from_micros(10));
            spawned += 1;
        }
        assert!((1..=20).contains(&spawned), "{spawned} jobs spawned");
    }

    #[test]
    fn a_queue_of_cpu_heavy_jobs_is_never_short() {
        let busy = limited();
        busy.record(Duration::from_micros(660));
        for _ in 0..1000 {
            busy.record(Duration::from_micros(660));
            assert!(!busy.is_short());
        }
    }

    #[tokio::test]
    async fn a_timed_job_reports_its_time_in_polls_not_its_waits() {
        let busy = limited();
        let job = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
        });
        Timed::new(job, busy.clone()).await;
        assert!(
            busy.mean() < Duration::from_millis(1),
            "the 20 ms sleep counted: {:?}",
            busy.mean()
        );
    }

    #[test]
    fn a_job_still_pending_after_a_long_poll_reports_at_once_and_only_once() {
        let busy = limited();
        let mut polls = 0;
        let job = Box::pin(std::future::poll_fn(|cx| {
            polls += 1;
            if polls < 3 {
                std::thread::sleep(LIMIT * 4);
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }));
        let mut timed = Timed::new(job, busy.clone());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut timed).poll(&mut cx).is_pending());
        let reported = busy.mean();
        assert!(reported > LIMIT / 2, "{reported:?}");
        assert!(Pin::new(&mut timed).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut timed).poll(&mut cx).is_ready());
        assert_eq!(busy.mean(), reported, "reported again");
    }

    #[test]
    fn a_timed_job_dropped_unfinished_reports_nothing() {
        let busy = limited();
        let job = Box::pin(std::future::pending::<()>());
        let mut timed = Timed::new(job, busy.clone());
        let waker = std::task::Waker::noop();
        assert!(
            Pin::new(&mut timed)
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
        drop(timed);
        assert_eq!(busy.mean(), Duration::ZERO);
    }
}
