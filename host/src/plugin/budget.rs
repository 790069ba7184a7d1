//! What one job may hand the host through its imports, counted before it is copied.
//!
//! Everything a guest passes to `log`, `enqueue` or `report-panic`, everything it writes
//! to stdout or stderr, and everything it hands `wasi:http` ends up in host memory, outside
//! the guest's memory cap. So each job has a [`HostCallBudget`]: the host reads the length
//! of a string or list while it still lies in guest memory, charges it, and copies it only
//! if it fits; the resources a job holds at once are capped too (see
//! `outbound::budget` for `wasi:http`).
//!
//! Exceeding the budget traps the guest: the attempt ends as a crash whose reason is the
//! [`BudgetExceeded`] message (`host-call budget exceeded: more than 1000 follow-ups in one
//! job`), and the worker retries or dead-letters it like any crash. A trap rather than an
//! error returned to the guest, because a guest that ignored the error could go on calling
//! at the host's expense until its timeout.

/// The most bytes of a follow-up's job type: an AMQP short string, as job types travel in
/// message properties.
pub(super) const JOB_TYPE_MAX: usize = crate::broker::SHORT_STRING_MAX;

/// The most bytes of a panic message the host accepts; the guest is about to abort, and a
/// longer message is a flood, not a diagnosis.
pub(super) const PANIC_MESSAGE_MAX: usize = 4 * 1024;

/// The most bytes of each part of an outgoing request a guest hands `wasi:http`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpPart {
    /// A method (`other(..)`): 64 bytes; real methods are a word.
    Method,
    /// A scheme (`other(..)`): 32 bytes; only `http` and `https` are ever sent.
    Scheme,
    /// An authority: 1 KiB; a host name is at most 253 bytes.
    Authority,
    /// A path with its query: 16 KiB, beyond what most servers accept.
    PathWithQuery,
    /// A header name: 256 bytes.
    HeaderName,
    /// A header value: 16 KiB, room for large tokens.
    HeaderValue,
}

impl HttpPart {
    /// The most bytes of this part.
    pub const fn max(self) -> usize {
        match self {
            Self::Method => 64,
            Self::Scheme => 32,
            Self::Authority => 1024,
            Self::PathWithQuery | Self::HeaderValue => 16 * 1024,
            Self::HeaderName => 256,
        }
    }
}

impl std::fmt::Display for HttpPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Method => "method",
            Self::Scheme => "scheme",
            Self::Authority => "authority",
            Self::PathWithQuery => "path with query",
            Self::HeaderName => "header name",
            Self::HeaderValue => "header value",
        })
    }
}

/// What each part handed to `wasi:http` is charged beyond its bytes, for the host's
/// bookkeeping of it; so an empty header is not free.
pub(super) const HTTP_PART_OVERHEAD: usize = 64;

/// Per-job limits on what a guest hands the host; see the [module](self) docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCallBudget {
    /// Calls to the `host` imports (`log`, `enqueue`, `report-panic`) in one job.
    /// Default 100,000.
    pub calls: u32,
    /// Follow-up jobs one job may enqueue, refused ones included. Default 1,000.
    pub follow_ups: u32,
    /// Bytes of follow-up payloads in one job, refused ones included. Default 16 MiB.
    pub follow_up_bytes: usize,
    /// Bytes of log messages, field keys and values, and stdout/stderr output in one job.
    /// Default 1 MiB. Only the first 64 KiB reach the log; the rest is counted and dropped.
    pub log_bytes: usize,
    /// Fields of one `log` call. Default 64.
    pub log_fields: u32,
    /// Bytes handed to `wasi:http` in one job: request parts, header names and values
    /// (each with [`HTTP_PART_OVERHEAD`] more), and the header maps it clones. Default
    /// 16 MiB.
    pub http_bytes: usize,
    /// Resources (requests, header maps, bodies, streams, pollables, responses) one job
    /// may hold at once: the size of its resource table. Default 1,024.
    pub resources: usize,
}

impl Default for HostCallBudget {
    fn default() -> Self {
        Self {
            calls: 100_000,
            follow_ups: 1_000,
            follow_up_bytes: 16 * 1024 * 1024,
            log_bytes: 1024 * 1024,
            log_fields: 64,
            http_bytes: 16 * 1024 * 1024,
            resources: 1024,
        }
    }
}

/// Which part of its [`HostCallBudget`] a job overran; the message is the crash reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetExceeded {
    /// Too many calls to the host imports.
    #[error("host-call budget exceeded: more than {limit} host calls in one job")]
    Calls {
        /// [`HostCallBudget::calls`].
        limit: u32,
    },
    /// Too many follow-ups.
    #[error("host-call budget exceeded: more than {limit} follow-ups in one job")]
    FollowUps {
        /// [`HostCallBudget::follow_ups`].
        limit: u32,
    },
    /// Too many bytes of follow-up payloads.
    #[error("host-call budget exceeded: more than {limit} bytes of follow-up payloads in one job")]
    FollowUpBytes {
        /// [`HostCallBudget::follow_up_bytes`].
        limit: usize,
    },
    /// A follow-up's job type longer than a job type can be.
    #[error(
        "host-call budget exceeded: a follow-up job type of {len} bytes, more than {JOB_TYPE_MAX}"
    )]
    JobType {
        /// The job type's length in bytes.
        len: usize,
    },
    /// Too many bytes of log output.
    #[error("host-call budget exceeded: more than {limit} bytes of log output in one job")]
    LogBytes {
        /// [`HostCallBudget::log_bytes`].
        limit: usize,
    },
    /// A `log` call with too many fields.
    #[error("host-call budget exceeded: a log call with {count} fields, more than {limit}")]
    LogFields {
        /// The call's field count.
        count: usize,
        /// [`HostCallBudget::log_fields`].
        limit: u32,
    },
    /// Too many bytes handed to `wasi:http`.
    #[error("host-call budget exceeded: more than {limit} bytes handed to wasi:http in one job")]
    HttpBytes {
        /// [`HostCallBudget::http_bytes`].
        limit: usize,
    },
    /// A request part longer than its [`HttpPart::max`].
    #[error("host-call budget exceeded: a wasi:http {part} of {len} bytes, more than {}", part.max())]
    HttpPart {
        /// Which part.
        part: HttpPart,
        /// Its length in bytes.
        len: usize,
    },
    /// A resource table full.
    #[error("host-call budget exceeded: more than {limit} resources held at once")]
    Resources {
        /// [`HostCallBudget::resources`].
        limit: usize,
    },
    /// A panic message longer than [`PANIC_MESSAGE_MAX`].
    #[error(
        "host-call budget exceeded: a panic message of {len} bytes, more than {PANIC_MESSAGE_MAX}; it starts: {start}"
    )]
    PanicMessage {
        /// The message's length in bytes.
        len: usize,
        /// Its start, bounded and escaped.
        start: String,
    },
}

/// What one job has spent of its budget on calls and follow-ups; the log's share is kept
/// by the job's log sink, which stdout and stderr also write to.
#[derive(Debug)]
pub(super) struct Spent {
    budget: HostCallBudget,
    calls: u32,
    follow_ups: u32,
    follow_up_bytes: usize,
    http_bytes: usize,
    /// The first overrun, kept so the crash reason names it.
    pub(super) exceeded: Option<BudgetExceeded>,
}

impl Spent {
    pub(super) fn new(budget: HostCallBudget) -> Self {
        Self {
            budget,
            calls: 0,
            follow_ups: 0,
            follow_up_bytes: 0,
            http_bytes: 0,
            exceeded: None,
        }
    }

    /// Charge one call to a host import.
    pub(super) fn call(&mut self) -> Result<(), BudgetExceeded> {
        self.calls = self.calls.saturating_add(1);
        if self.calls > self.budget.calls {
            return Err(BudgetExceeded::Calls {
                limit: self.budget.calls,
            });
        }
        Ok(())
    }

    /// Check the field count of a `log` call before its fields are read.
    pub(super) fn log_fields(&self, count: usize) -> Result<(), BudgetExceeded> {
        let limit = self.budget.log_fields;
        if count > limit as usize {
            return Err(BudgetExceeded::LogFields { count, limit });
        }
        Ok(())
    }

    /// Check that `count` more follow-ups (a batch's members) fit before their views are
    /// read; each is then charged with [`Spent::follow_up`].
    pub(super) fn follow_ups_fit(&self, count: usize) -> Result<(), BudgetExceeded> {
        let after = (self.follow_ups as usize).saturating_add(count);
        if after > self.budget.follow_ups as usize {
            return Err(BudgetExceeded::FollowUps {
                limit: self.budget.follow_ups,
            });
        }
        Ok(())
    }

    /// Charge one `enqueue` of a job type of `job_type_len` bytes and a payload of
    /// `payload_len` bytes, before either is copied.
    pub(super) fn follow_up(
        &mut self,
        job_type_len: usize,
        payload_len: usize,
    ) -> Result<(), BudgetExceeded> {
        self.follow_ups = self.follow_ups.saturating_add(1);
        if self.follow_ups > self.budget.follow_ups {
            return Err(BudgetExceeded::FollowUps {
                limit: self.budget.follow_ups,
            });
        }
        if job_type_len > JOB_TYPE_MAX {
            return Err(BudgetExceeded::JobType { len: job_type_len });
        }
        self.follow_up_bytes = self.follow_up_bytes.saturating_add(payload_len);
        if self.follow_up_bytes > self.budget.follow_up_bytes {
            return Err(BudgetExceeded::FollowUpBytes {
                limit: self.budget.follow_up_bytes,
            });
        }
        Ok(())
    }

    /// Charge a part of `len` bytes handed to `wasi:http`, before it is copied.
    pub(super) fn http_part(&mut self, part: HttpPart, len: usize) -> Result<(), BudgetExceeded> {
        if len > part.max() {
            return Err(BudgetExceeded::HttpPart { part, len });
        }
        self.http_bytes(len.saturating_add(HTTP_PART_OVERHEAD))
    }

    /// Charge `len` bytes that `wasi:http` is about to copy for the guest.
    pub(super) fn http_bytes(&mut self, len: usize) -> Result<(), BudgetExceeded> {
        self.http_bytes = self.http_bytes.saturating_add(len);
        if self.http_bytes > self.budget.http_bytes {
            return Err(BudgetExceeded::HttpBytes {
                limit: self.budget.http_bytes,
            });
        }
        Ok(())
    }

    /// Keep the first overrun for the crash reason, and hand it back as the trap.
    pub(super) fn overrun(&mut self, exceeded: BudgetExceeded) -> wasmtime::Error {
        let error = wasmtime::Error::new(exceeded.clone());
        self.exceeded.get_or_insert(exceeded);
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(budget: HostCallBudget) -> Spent {
        Spent::new(budget)
    }

    #[test]
    fn host_calls_beyond_the_budget_are_refused_by_count() {
        let mut spent = spent(HostCallBudget {
            calls: 3,
            ..HostCallBudget::default()
        });
        for _ in 0..3 {
            spent.call().expect("within the budget");
        }
        let err = spent.call().expect_err("the fourth call is one too many");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: more than 3 host calls in one job"
        );
    }

    #[test]
    fn a_log_call_may_carry_64_fields_by_default() {
        let spent = spent(HostCallBudget::default());
        spent.log_fields(64).expect("within the budget");
        let err = spent.log_fields(100_000).expect_err("a flood of fields");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: a log call with 100000 fields, more than 64"
        );
    }

    #[test]
    fn the_default_follow_up_count_is_a_thousand_and_the_next_one_names_it() {
        let mut spent = spent(HostCallBudget::default());
        for _ in 0..1_000 {
            spent.follow_up(8, 2).expect("within the budget");
        }
        let err = spent.follow_up(8, 2).expect_err("follow-up 1001");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: more than 1000 follow-ups in one job"
        );
    }

    #[test]
    fn a_job_type_longer_than_a_short_string_is_refused_before_it_is_copied() {
        let mut spent = spent(HostCallBudget::default());
        spent.follow_up(JOB_TYPE_MAX, 2).expect("255 bytes fit");
        let err = spent.follow_up(10 << 20, 2).expect_err("10 MiB do not");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: a follow-up job type of 10485760 bytes, more than 255"
        );
    }

    #[test]
    fn follow_up_payloads_are_bounded_in_total_size() {
        let mut spent = spent(HostCallBudget {
            follow_up_bytes: 100,
            ..HostCallBudget::default()
        });
        spent.follow_up(8, 60).expect("within the budget");
        spent.follow_up(8, 40).expect("exactly the budget");
        let err = spent.follow_up(8, 1).expect_err("one byte more");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: more than 100 bytes of follow-up payloads in one job"
        );
    }

    #[test]
    fn a_payload_of_any_length_cannot_wrap_the_byte_count() {
        let mut spent = spent(HostCallBudget::default());
        spent.follow_up(8, 1).expect("within the budget");
        assert!(matches!(
            spent.follow_up(8, usize::MAX),
            Err(BudgetExceeded::FollowUpBytes { .. })
        ));
    }

    #[test]
    fn a_wasi_http_part_longer_than_its_cap_is_refused_before_it_is_copied() {
        let mut spent = spent(HostCallBudget::default());
        spent.http_part(HttpPart::Method, 64).expect("64 bytes fit");
        let err = spent
            .http_part(HttpPart::Method, 64 << 20)
            .expect_err("64 MiB do not");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: a wasi:http method of 67108864 bytes, more than 64"
        );
    }

    #[test]
    fn wasi_http_bytes_are_bounded_in_total_and_empty_parts_count() {
        let mut spent = spent(HostCallBudget {
            http_bytes: 3 * HTTP_PART_OVERHEAD,
            ..HostCallBudget::default()
        });
        for _ in 0..3 {
            spent
                .http_part(HttpPart::HeaderName, 0)
                .expect("within the budget");
        }
        let err = spent
            .http_part(HttpPart::HeaderValue, 0)
            .expect_err("one empty part more");
        assert_eq!(
            err.to_string(),
            "host-call budget exceeded: more than 192 bytes handed to wasi:http in one job"
        );
        assert!(matches!(
            spent.http_bytes(usize::MAX),
            Err(BudgetExceeded::HttpBytes { .. })
        ));
    }

    #[test]
    fn the_first_overrun_is_kept_for_the_crash_reason() {
        let mut spent = spent(HostCallBudget::default());
        let first = BudgetExceeded::FollowUps { limit: 1 };
        let trap = spent.overrun(first.clone());
        spent.overrun(BudgetExceeded::Calls { limit: 2 });
        assert_eq!(spent.exceeded, Some(first.clone()));
        assert_eq!(trap.to_string(), first.to_string());
    }
}
