use super::*;

fn queue(name: &str) -> wit::QueueConfig {
    wit::QueueConfig {
        name: name.to_owned(),
        prefetch: 16,
        durable: true,
        queue_type: wit::QueueType::Classic,
        max_priority: 10,
        message_ttl: None,
        retry: None,
        timeout: None,
        concurrency: None,
        rate: None,
    }
}

fn job(name: &str, queue: &str) -> wit::JobConfig {
    wit::JobConfig {
        name: name.to_owned(),
        queue: queue.to_owned(),
        retry: None,
        timeout: None,
        concurrency: None,
        rate: None,
        unique: None,
        schedule: None,
    }
}

fn rate(count: u32, unit: wit::RateUnit, burst: u32) -> wit::RateLimit {
    wit::RateLimit { count, unit, burst }
}

#[test]
fn declared_limits_are_kept_by_queue_and_job_type_and_none_is_not_kept() {
    let q = wit::QueueConfig {
        concurrency: Some(4),
        rate: Some(rate(50, wit::RateUnit::Second, 20)),
        ..queue("q")
    };
    let j = wit::JobConfig {
        concurrency: Some(wit::KeyConcurrency {
            key: "customer_id".to_owned(),
            limit: 2,
        }),
        rate: Some(wit::KeyRate {
            key: Some("customer_id".to_owned()),
            rate: rate(10, wit::RateUnit::Minute, 10),
            respect_retry_after: true,
        }),
        ..job("j", "q")
    };
    let parsed =
        from_wit(manifest(vec![q, queue("free")], vec![j, job("k", "free")])).expect("valid");
    let declared_queue = &parsed.limits.queues["q"];
    assert_eq!(declared_queue.concurrency, Some(4));
    let queue_rate = declared_queue.rate.expect("a rate");
    assert_eq!(
        (queue_rate.shown(), queue_rate.burst),
        ("50/s".to_owned(), 20)
    );
    let declared_job = &parsed.limits.jobs["j"];
    assert_eq!(
        declared_job.concurrency.as_ref().map(|cap| cap.limit),
        Some(2)
    );
    assert_eq!(
        declared_job
            .rate
            .as_ref()
            .map(|r| (r.rate.shown(), r.respect_retry_after)),
        Some(("10/m".to_owned(), true))
    );
    assert!(!parsed.limits.queues.contains_key("free"));
    let unique = wit::JobConfig {
        unique: Some(wit::UniqueKey {
            key: "order_id".to_owned(),
            for_: 600_000,
        }),
        ..job("u", "q")
    };
    let parsed = from_wit(manifest(vec![queue("q")], vec![unique])).expect("valid");
    let declared = parsed.limits.jobs["u"].unique.as_ref().expect("unique");
    assert_eq!(
        (declared.key.as_str(), declared.for_),
        ("order_id", Duration::from_secs(600))
    );
    assert!(!parsed.limits.jobs.contains_key("k"));
}

#[test]
fn declared_limits_out_of_the_sdks_bounds_are_refused_at_load() {
    let cases = [
        (
            wit::QueueConfig {
                concurrency: Some(0),
                ..queue("q")
            },
            job("j", "q"),
            "queue `q`: `concurrency` is 0; it must be 1 to 1000",
        ),
        (
            wit::QueueConfig {
                rate: Some(rate(5000, wit::RateUnit::Second, 10)),
                ..queue("q")
            },
            job("j", "q"),
            "queue `q`: `rate` 5000/s (burst 10): at most 1000 jobs a second",
        ),
        (
            queue("q"),
            wit::JobConfig {
                rate: Some(wit::KeyRate {
                    key: Some("k".to_owned()),
                    rate: rate(1, wit::RateUnit::Hour, 0),
                    respect_retry_after: false,
                }),
                ..job("j", "q")
            },
            "job `j`: `rate` 1/h (burst 0): is 0; it must be 1 to 10000",
        ),
        (
            queue("q"),
            wit::JobConfig {
                concurrency: Some(wit::KeyConcurrency {
                    key: "a.b".to_owned(),
                    limit: 2,
                }),
                ..job("j", "q")
            },
            "job `j`: `concurrency` it must be 1 to 64 ASCII letters",
        ),
        (
            queue("q"),
            wit::JobConfig {
                unique: Some(wit::UniqueKey {
                    key: "order_id".to_owned(),
                    for_: 0,
                }),
                ..job("j", "q")
            },
            "job `j`: `unique` `for` is 0ns; it must be 1ms to",
        ),
    ];
    for (q, j, wanted) in cases {
        let err = from_wit(manifest(vec![q], vec![j])).expect_err(wanted);
        assert!(err.to_string().starts_with(wanted), "{err}");
    }
}

fn manifest(queues: Vec<wit::QueueConfig>, jobs: Vec<wit::JobConfig>) -> wit::Manifest {
    wit::Manifest {
        name: "emails".to_owned(),
        queues,
        jobs,
    }
}

fn exponential(base: u64, factor: f64, max: u64) -> wit::RetryPolicy {
    wit::RetryPolicy {
        max_attempts: 3,
        backoff: wit::Backoff::Exponential(wit::ExponentialBackoff {
            base,
            factor,
            max,
            jitter: true,
        }),
    }
}

/// The error for a manifest with one queue `q` carrying `retry` and one job on it.
fn queue_policy_error(retry: wit::RetryPolicy) -> ManifestError {
    let mut q = queue("q");
    q.retry = Some(retry);
    from_wit(manifest(vec![q], vec![job("j", "q")])).expect_err("the policy must be refused")
}

#[test]
fn a_valid_manifest_becomes_host_types_with_durations_and_policies() {
    let mut q = queue("app.emails");
    q.message_ttl = Some(60_000);
    q.timeout = Some(30_000);
    q.retry = Some(exponential(1_000, 2.0, 120_000));
    let mut j = job("app::SendEmail", "app.emails");
    j.retry = Some(wit::RetryPolicy {
        max_attempts: 5,
        backoff: wit::Backoff::Fixed(3_000),
    });
    j.timeout = Some(10_000);

    let manifest = from_wit(manifest(vec![q, queue("app.bare")], vec![j])).expect("valid manifest");

    let emails = manifest.queue("app.emails").expect("the queue is kept");
    assert_eq!(emails.message_ttl, Some(Duration::from_secs(60)));
    assert_eq!(emails.timeout, Some(Duration::from_secs(30)));
    assert_eq!(
        emails.retry,
        RetryPolicy::new(
            3,
            Backoff::Exponential {
                base: Duration::from_secs(1),
                factor: 2.0,
                max: Duration::from_secs(120),
                jitter: true
            }
        )
    );
    let job = manifest.job("app::SendEmail").expect("the job is kept");
    assert_eq!(
        job.retry,
        Some(RetryPolicy::fixed(5, Duration::from_secs(3)))
    );
    assert_eq!(job.timeout, Some(Duration::from_secs(10)));
}

#[test]
fn a_queue_without_a_policy_gets_the_default_of_one_attempt() {
    let manifest =
        from_wit(manifest(vec![queue("q")], vec![job("j", "q")])).expect("valid manifest");
    assert_eq!(manifest.queues[0].retry, RetryPolicy::default());
    assert_eq!(
        manifest.jobs[0].retry, None,
        "a job without a policy keeps none of its own"
    );
}

#[test]
fn a_manifest_without_jobs_is_refused() {
    let err = from_wit(manifest(vec![queue("q")], vec![])).unwrap_err();
    assert_eq!(err.to_string(), "plugin `emails` declares no jobs");
}

#[test]
fn a_plugin_without_a_name_is_refused() {
    let mut m = manifest(vec![queue("q")], vec![job("j", "q")]);
    m.name = " ".to_owned();
    assert_eq!(from_wit(m).unwrap_err(), ManifestError::EmptyPluginName);
}

#[test]
fn a_job_on_an_undeclared_queue_is_refused_naming_both() {
    let err = from_wit(manifest(vec![queue("q")], vec![job("j", "elsewhere")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "job `j` uses queue `elsewhere`, which the manifest does not declare"
    );
}

#[test]
fn duplicate_job_and_queue_names_are_refused() {
    let err = from_wit(manifest(
        vec![queue("q")],
        vec![job("j", "q"), job("j", "q")],
    ))
    .unwrap_err();
    assert_eq!(err.to_string(), "job `j` is declared twice");
    let err = from_wit(manifest(vec![queue("q"), queue("q")], vec![job("j", "q")])).unwrap_err();
    assert_eq!(err.to_string(), "queue `q` is declared twice");
}

#[test]
fn queue_names_the_broker_would_refuse_or_confuse_are_refused() {
    let long = "q".repeat(250);
    for (name, reason) in [
        ("", "it is empty"),
        ("my queue", "whitespace"),
        ("amq.jobs", "reserved"),
        ("jobs.dead", "dead-letter or hold queue"),
        ("jobs.deferred.1000", "dead-letter or hold queue"),
        (long.as_str(), "longer than 255 bytes"),
    ] {
        let err = from_wit(manifest(vec![queue(name)], vec![job("j", name)])).unwrap_err();
        assert!(
            matches!(&err, ManifestError::InvalidQueueName { name: n, reason: r } if n == name && r.contains(reason)),
            "queue name `{name}` must be refused because of `{reason}`, got: {err}"
        );
    }
}

#[test]
fn empty_job_names_are_refused() {
    let err = from_wit(manifest(vec![queue("q")], vec![job("", "q")])).unwrap_err();
    assert_eq!(err.to_string(), "job name `` is invalid: it is empty");
}

#[test]
fn a_job_name_longer_than_a_short_string_is_refused_and_shown_bounded() {
    let long = "j".repeat(1 << 20);
    let err = from_wit(manifest(vec![queue("q")], vec![job(&long, "q")])).unwrap_err();
    let message = err.to_string();
    assert!(
        message.ends_with("bytes in all)` is invalid: it is longer than 255 bytes"),
        "{message}"
    );
    assert!(
        message.len() < 512,
        "the message is bounded: {}",
        message.len()
    );
}

#[test]
fn a_plugin_name_must_be_a_short_printable_line() {
    let mut m = manifest(vec![queue("q")], vec![job("j", "q")]);
    m.name = "emails\n2026-01-01 ERROR forged".to_owned();
    assert_eq!(
        from_wit(m.clone()).unwrap_err().to_string(),
        "plugin name `emails\\n2026-01-01 ERROR forged` is invalid: it contains control characters"
    );
    m.name = "p".repeat(201);
    assert!(matches!(
        from_wit(m).unwrap_err(),
        ManifestError::InvalidPluginName {
            reason: "it is longer than 200 bytes",
            ..
        }
    ));
}

#[test]
fn an_undeclared_queue_of_megabytes_is_shown_bounded() {
    let huge = "q".repeat(1 << 20);
    let err = from_wit(manifest(vec![queue("q")], vec![job("j", &huge)])).unwrap_err();
    assert!(err.to_string().len() < 512, "{}", err.to_string().len());
}

#[test]
fn a_policy_without_attempts_is_refused() {
    let err = queue_policy_error(wit::RetryPolicy {
        max_attempts: 0,
        backoff: wit::Backoff::None,
    });
    assert_eq!(
        err.to_string(),
        "queue `q`: `max_attempts` is 0; it must be at least 1"
    );
}

#[test]
fn exponential_factors_must_be_finite_and_positive() {
    for factor in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = queue_policy_error(exponential(1_000, factor, 60_000));
        assert!(
            matches!(&err, ManifestError::InvalidSetting { key: "factor", .. }),
            "factor {factor} must be refused, got: {err}"
        );
    }
}

#[test]
fn an_exponential_base_above_its_max_is_refused() {
    let err = queue_policy_error(exponential(10_000, 2.0, 2_000));
    assert_eq!(
        err.to_string(),
        "queue `q`: `base` is 10s, above `max` (2s)"
    );
}

#[test]
fn zero_durations_are_refused_everywhere() {
    let err = queue_policy_error(wit::RetryPolicy {
        max_attempts: 2,
        backoff: wit::Backoff::Fixed(0),
    });
    assert_eq!(
        err.to_string(),
        "queue `q`: `delay` is zero; it must be positive"
    );
    let err = queue_policy_error(exponential(0, 2.0, 1_000));
    assert!(
        matches!(err, ManifestError::InvalidSetting { key: "base", .. }),
        "zero base: {err}"
    );

    let mut j = job("j", "q");
    j.timeout = Some(0);
    let err = from_wit(manifest(vec![queue("q")], vec![j])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "job `j`: `timeout` is zero; it must be positive"
    );

    let mut q = queue("q");
    q.message_ttl = Some(0);
    let err = from_wit(manifest(vec![q], vec![job("j", "q")])).unwrap_err();
    assert!(
        matches!(
            err,
            ManifestError::InvalidSetting {
                key: "message_ttl",
                ..
            }
        ),
        "zero ttl: {err}"
    );
}

#[test]
fn a_retry_wait_longer_than_a_hold_queue_can_hold_is_refused() {
    let too_long = u64::try_from(MAX_HOLD_DELAY.as_millis()).unwrap() + 1;
    let err = queue_policy_error(wit::RetryPolicy {
        max_attempts: 2,
        backoff: wit::Backoff::Fixed(too_long),
    });
    assert!(
        matches!(&err, ManifestError::InvalidSetting { key: "delay", reason, .. } if reason.contains("hold queue")),
        "{err}"
    );
}

#[test]
fn a_queue_with_zero_prefetch_is_refused() {
    let mut q = queue("q");
    q.prefetch = 0;
    let err = from_wit(manifest(vec![q], vec![job("j", "q")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "queue `q`: `prefetch` is 0; it must be 1..=65535"
    );
}

#[test]
fn a_quorum_queue_that_is_not_durable_is_refused() {
    let q = wit::QueueConfig {
        durable: false,
        queue_type: wit::QueueType::Quorum,
        ..queue("q")
    };
    let err = from_wit(manifest(vec![q], vec![job("j", "q")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "queue `q`: `durable` is false, but a quorum queue is always durable"
    );
}

#[test]
fn a_quorum_queue_keeps_its_type() {
    let q = wit::QueueConfig {
        queue_type: wit::QueueType::Quorum,
        ..queue("q")
    };
    let parsed = from_wit(manifest(vec![q], vec![job("j", "q")])).expect("valid");
    assert_eq!(parsed.queues[0].queue_type, QueueType::Quorum);
}

fn scheduled(
    name: &str,
    timing: wit::ScheduleTiming,
    payload: &str,
    catch_up: u32,
) -> wit::JobConfig {
    wit::JobConfig {
        schedule: Some(wit::JobSchedule {
            timing,
            payload: payload.to_owned(),
            catch_up,
        }),
        ..job(name, "q")
    }
}

fn cron(expression: &str, tz: &str) -> wit::ScheduleTiming {
    wit::ScheduleTiming::Cron(wit::CronSchedule {
        expression: expression.to_owned(),
        tz: tz.to_owned(),
    })
}

#[test]
fn a_declared_schedule_is_kept_under_its_job_type_read_as_the_grants_file_reads_one() {
    let jobs = vec![
        scheduled(
            "report.Daily",
            cron("0 7 * * *", "Europe/Paris"),
            r#"{"kind":"daily"}"#,
            3,
        ),
        scheduled("tick.Every", wit::ScheduleTiming::Every(30_000), "{}", 0),
        job("plain", "q"),
    ];
    let parsed = from_wit(manifest(vec![queue("q")], jobs)).expect("valid");
    assert_eq!(
        parsed.schedules.len(),
        2,
        "only the job types that declare one"
    );
    let daily = &parsed.schedules["report.Daily"];
    assert_eq!(daily.job_type, "report.Daily");
    assert_eq!(daily.payload, serde_json::json!({"kind": "daily"}));
    assert_eq!(daily.missed, Missed::CatchUp(3));
    assert!(daily.enabled);
    // 2026-12-07 06:00 UTC is 07:00 in Paris.
    assert_eq!(
        daily.timing.next_after(1_796_600_000_000),
        Some(1_796_623_200_000)
    );
    let every = &parsed.schedules["tick.Every"];
    assert_eq!(every.timing, Timing::Every(Duration::from_secs(30)));
    assert_eq!(every.missed, Missed::Skip);
}

#[test]
fn a_declared_schedule_the_host_cannot_fire_refuses_the_plugin_saying_why() {
    let big = format!("\"{}\"", "x".repeat(70_000));
    for (declared, wanted) in [
        (
            scheduled("j", cron("0 7 * *", ""), "{}", 0),
            "job `j`: `schedule` cron `0 7 * *`: 4 fields",
        ),
        (
            scheduled("j", cron("0 61 * * *", ""), "{}", 0),
            "job `j`: `schedule` cron `0 61 * * *`",
        ),
        (
            scheduled("j", cron("0 7 * * *", "Mars/Olympus"), "{}", 0),
            "job `j`: `schedule` tz `Mars/Olympus`: not an IANA time zone",
        ),
        (
            scheduled("j", wit::ScheduleTiming::Every(999), "{}", 0),
            "job `j`: `schedule` every: it must be at least 1s",
        ),
        (
            scheduled("j", wit::ScheduleTiming::Every(1_000), "{not json", 0),
            "job `j`: `schedule` payload is not JSON",
        ),
        (
            scheduled("j", wit::ScheduleTiming::Every(1_000), &big, 0),
            "job `j`: `schedule` payload of 70002 bytes; it may have at most 65536",
        ),
        (
            scheduled("j", wit::ScheduleTiming::Every(1_000), "{}", 1_001),
            "job `j`: `schedule` catch_up 1001: at most 1000",
        ),
        (
            scheduled("a b", wit::ScheduleTiming::Every(1_000), "{}", 0),
            "job `a b`: `schedule` schedule name `a b`",
        ),
    ] {
        let err = from_wit(manifest(vec![queue("q")], vec![declared]))
            .expect_err(wanted)
            .to_string();
        assert!(err.contains(wanted), "{err}");
    }
}
