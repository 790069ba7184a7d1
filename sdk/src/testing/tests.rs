use serde::{Deserialize, Serialize};

use super::*;
use crate::{EnqueueError, MAX_DELAY, QueueConfig, RetryPolicy};

/// A queue of one job type, [`Task`], for the SDK's own tests of native runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Work;

impl Queues for Work {
    fn all() -> &'static [Self] {
        &[Self]
    }

    fn name(&self) -> &'static str {
        "t.work"
    }

    fn config(&self) -> QueueConfig {
        QueueConfig {
            retry: RetryPolicy::exponential(4),
            ..QueueConfig::new(self.name())
        }
    }
}

/// A job that [`task`] runs.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Task {
    pub(crate) delay_ms: Option<u64>,
}

impl Job for Task {
    const NAME: &'static str = "t.Task";
    type Queues = Work;
    const QUEUE: Work = Work;

    fn retry_policy() -> Option<RetryPolicy> {
        None
    }

    fn timeout() -> Option<Duration> {
        None
    }
}

/// Logs its delivery, then enqueues itself again after `delay_ms`, if any.
fn task(job: Task, ctx: &JobContext) -> Result<(), JobError> {
    ctx.log(
        Level::Warn,
        "running",
        &[("attempt", &ctx.attempt()), ("of", &ctx.max_attempts())],
    );
    if let Some(ms) = job.delay_ms {
        let delay = Duration::from_millis(ms);
        ctx.enqueue_after(&Task { delay_ms: None }, delay)
            .map_err(|e| JobError::retryable(e.to_string()))?;
    }
    Ok(())
}

#[test]
fn a_run_records_the_delivery_the_handler_saw_and_what_it_logged() {
    let run = TestContext::new()
        .attempt(2)
        .run(task, Task { delay_ms: None });
    assert_eq!(run.result, Ok(()));
    assert_eq!(
        run.logs,
        vec![LogLine {
            level: Level::Warn,
            message: "running".to_owned(),
            fields: vec![
                ("attempt".to_owned(), "2".to_owned()),
                ("of".to_owned(), "4".to_owned())
            ],
        }],
        "max attempts default to the queue's policy"
    );
    assert_eq!(run.messages(), ["running"]);
}

#[test]
fn the_context_describes_the_delivery_as_the_builder_set_it() {
    let test = TestContext::new()
        .job_id("id-7")
        .attempt(3)
        .max_attempts(3)
        .deferrals(2)
        .priority(9)
        .age(Duration::from_secs(4));
    let run = test.run(
        |_: Task, ctx: &JobContext| {
            assert_eq!(ctx.job_id(), "id-7");
            assert_eq!((ctx.job_type(), ctx.queue()), ("t.Task", "t.work"));
            assert_eq!((ctx.attempt(), ctx.max_attempts()), (3, 3));
            assert!(ctx.is_last_attempt(), "attempt 3 of 3 is the last");
            assert_eq!((ctx.deferrals(), ctx.priority()), (2, 9));
            assert_eq!(ctx.age(), Duration::from_secs(4));
            Ok(())
        },
        Task { delay_ms: None },
    );
    assert_eq!(run.result, Ok(()));
}

#[test]
fn a_recorded_context_is_send_and_sync_as_the_hosts_is() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<JobContext>();
}

/// Fans two tasks out as a batch gathered by a task, then adds one to its own batch.
fn fan(_job: Task, ctx: &JobContext) -> Result<(), JobError> {
    let batch = crate::batch::Batch::new()
        .job(&Task { delay_ms: Some(1) })
        .job(&Task { delay_ms: Some(2) })
        .on_complete::<Task>()
        .context(&"nightly");
    ctx.enqueue_batch(batch)
        .map_err(|e| JobError::fatal(e.to_string()))?;
    ctx.add_to_batch(&[Task { delay_ms: Some(3) }])
        .map_err(|e| JobError::fatal(e.to_string()))?;
    Ok(())
}

#[test]
fn a_batch_and_the_jobs_a_member_adds_to_its_own_are_recorded_apart_from_follow_ups() {
    let run = TestContext::new()
        .in_batch("parent")
        .run(fan, Task::default());
    assert_eq!(run.result, Ok(()));
    assert!(run.follow_ups.is_empty());
    let batch = &run.batches[0];
    assert_eq!(batch.batch_id, "batch-1");
    assert_eq!(batch.jobs.len(), 2);
    assert_eq!(batch.jobs[1].job_id, "batch-member-2");
    assert_eq!(batch.jobs[1].payload["delay_ms"], 2);
    assert_eq!(
        (batch.on_complete, batch.on_success),
        (Some("t.Task"), None)
    );
    assert_eq!(batch.context, Some("nightly".into()));
    assert_eq!(run.added[0].job_id, "added-1");
}

#[test]
fn adding_to_a_batch_is_refused_to_a_job_that_is_in_none() {
    let run = TestContext::new().run(fan, Task::default());
    assert_eq!(
        run.result,
        Err(JobError::fatal(
            "the host refused the batch: this job is in no batch"
        ))
    );
}

#[test]
fn follow_ups_are_recorded_with_their_delay_and_decode_as_their_job() {
    let run = TestContext::new().run(
        task,
        Task {
            delay_ms: Some(1500),
        },
    );
    assert_eq!(run.result, Ok(()));
    assert_eq!(run.follow_ups.len(), 1);
    assert_eq!(run.follow_ups[0].job_id, "follow-up-1");
    assert_eq!(run.follow_ups[0].delay, Some(Duration::from_millis(1500)));
    assert_eq!(run.follow_ups_of::<Task>(), [Task { delay_ms: None }]);
}

#[test]
fn a_refusing_host_makes_enqueue_fail_with_its_reason() {
    let run = TestContext::new()
        .refuse_follow_ups("no plugin handles `t.Task`")
        .run(task, Task { delay_ms: Some(1) });
    assert_eq!(
        run.result,
        Err(JobError::retryable(
            "the host refused `t.Task`: no plugin handles `t.Task`"
        ))
    );
    assert!(run.follow_ups.is_empty());
}

#[test]
fn a_follow_up_delayed_beyond_the_longest_hold_is_refused_without_asking_the_host() {
    let too_long = MAX_DELAY + Duration::from_millis(1);
    let run = TestContext::new().run(
        |_: Task, ctx: &JobContext| {
            let err = ctx
                .enqueue_after(&Task { delay_ms: None }, too_long)
                .expect_err("no hold queue holds a job that long");
            assert!(matches!(err, EnqueueError::DelayTooLong { delay, .. } if delay == too_long));
            assert_eq!(
                err.to_string(),
                "the delay of 2147483.648s of a follow-up `t.Task` exceeds the longest \
                 hold of 2147483.647s"
            );
            Ok(())
        },
        Task { delay_ms: None },
    );
    assert_eq!(run.result, Ok(()));
    assert!(run.follow_ups.is_empty(), "the host was never asked");
    let at_the_limit = TestContext::new().run(
        task,
        Task {
            delay_ms: Some(u64::try_from(MAX_DELAY.as_millis()).expect("fits")),
        },
    );
    assert_eq!(
        at_the_limit.follow_ups.len(),
        1,
        "the limit itself is accepted"
    );
}

#[test]
fn a_deferral_built_by_hand_beyond_the_longest_hold_is_the_fatal_error_the_host_gets() {
    let run = TestContext::new().run(
        |_: Task, _: &JobContext| {
            Err(JobError::Deferred {
                delay: Duration::MAX,
                reason: "forever".to_owned(),
                retry_after: false,
            })
        },
        Task { delay_ms: None },
    );
    assert!(
        matches!(&run.result, Err(JobError::Fatal(msg)) if msg.contains("exceeds the longest hold")),
        "{:?}",
        run.result
    );
}

#[test]
fn config_values_are_read_during_the_run_and_none_after_it() {
    let run = TestContext::new()
        .config("endpoint", "http://hooks.test/in")
        .config("signing_key", "k1")
        .run(
            |_: Task, _: &JobContext| {
                assert_eq!(
                    crate::config::get("endpoint"),
                    Ok(Some("http://hooks.test/in".to_owned()))
                );
                assert_eq!(crate::config::require("signing_key"), Ok("k1".to_owned()));
                assert_eq!(crate::config::get("unset"), Ok(None), "a key never set");
                Ok(())
            },
            Task::default(),
        );
    assert_eq!(run.result, Ok(()));
    assert_eq!(
        crate::config::get("endpoint"),
        Ok(None),
        "the run's values are gone with it"
    );
}

#[test]
fn a_run_inside_a_run_sees_its_own_config_and_gives_the_outer_one_back() {
    let outer = TestContext::new().config("who", "outer");
    let run = outer.run(
        |_: Task, _: &JobContext| {
            let inner = TestContext::new().config("who", "inner").run(
                |_: Task, _: &JobContext| {
                    assert_eq!(crate::config::require("who"), Ok("inner".to_owned()));
                    Ok(())
                },
                Task::default(),
            );
            assert_eq!(inner.result, Ok(()));
            crate::config::require("who").map(|who| assert_eq!(who, "outer"))
        },
        Task::default(),
    );
    assert_eq!(run.result, Ok(()));
}
