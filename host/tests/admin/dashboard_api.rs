//! What the dashboard's page reads, without a browser: the overview of a host on the
//! memory backend, with the batches its keeper folded, and the live stream, which ends when the host shuts down so that a
//! page left open never holds up Ctrl-C, and of which each session has slots of its own.
//! And what the admin API's `POST /jobs` makes of each `expires_in_ms` and of a duplicate
//! of a unique job.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobhost::activity::Activity;
use jobhost::admin::api::EnqueueRequest;
use jobhost::admin::dashboard::{BATCHES_SHOWN, MAX_STREAMS_PER_CALLER, Overview};
use jobhost::admin::{self, AdminAccess, AdminClient, AdminState};
use jobhost::batches::{BatchRequest, Board, Keeper, callback_job_id};
use jobhost::broker::{Backend, BatchRecord, Callback, MemberEnd, MemoryBackend};
use jobhost::grants::SharedGrants;
use jobhost::job::{Deadline, JobSpec, Manifest, Outcome};
use jobhost::metrics::Metrics;
use jobhost::policy::Granularity;
use jobhost::telemetry::Telemetry;
use jobhost::testing::native_unit;
use jobhost::worker::{Fleet, Plugins};
use jobhost_sdk::{QueueConfig, RetryPolicy};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(10);
const TOKEN: &str = "token";

/// The admin API of a host with one plugin serving `jobs.Work` on queue `work`, whose
/// broker holds one dead letter, and its batch keeper, until `stop`.
async fn host(stop: &CancellationToken) -> String {
    host_on(&MemoryBackend::new(), stop).await
}

/// [`host`], on `backend`.
async fn host_on(backend: &MemoryBackend, stop: &CancellationToken) -> String {
    let mut queue = QueueConfig::new("work");
    queue.retry = RetryPolicy::fixed(3, Duration::from_secs(2));
    let job = JobSpec {
        name: "jobs.Work".into(),
        queue: "work".into(),
        retry: None,
        timeout: None,
    };
    let manifest = Manifest {
        limits: Default::default(),
        schedules: Default::default(),
        name: "worker".into(),
        queues: vec![queue],
        jobs: vec![job],
    };
    let plugins = Plugins::new();
    let unit = native_unit(
        "worker.wasm",
        manifest,
        |_: &jobhost::job::Invocation<'_>| Outcome::Completed { follow_ups: vec![] },
    );
    plugins.install(unit).expect("installs");
    for queue in plugins.current().queues() {
        backend.declare(queue).await.expect("declared");
    }
    let letter = jobhost::broker::DeadLetterOut {
        queue: "work",
        body: b"not an envelope",
        reason: "malformed envelope",
        attempts: 0,
        trace: None,
    };
    backend.dead_letter(letter).await.expect("dead-lettered");
    let batches = Board::default();
    let keeper = Keeper::new(backend.clone(), plugins.clone(), batches.clone());
    tokio::spawn(keeper.run(stop.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("its address");
    let state = AdminState {
        backend: backend.clone(),
        plugins,
        granularity: Granularity::default(),
        access: AdminAccess::new(TOKEN, "127.0.0.1:0", addr),
        metrics: Metrics::new(),
        activity: Activity::default(),
        telemetry: Telemetry::none(),
        grants: SharedGrants::default(),
        fleet: Fleet::default(),
        batches,
    };
    tokio::spawn(admin::serve(listener, state, stop.clone()));
    addr.to_string()
}

/// `GET path` as the token holder.
async fn request(addr: &str, path: &str) -> TcpStream {
    request_as(addr, path, &format!("Authorization: Bearer {TOKEN}")).await
}

/// `GET path` with the credential header `credential`.
async fn request_as(addr: &str, path: &str, credential: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{credential}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("sends");
    stream
}

/// The status line of the answer on `stream`.
async fn status_line(stream: TcpStream) -> (String, BufReader<TcpStream>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, reader.read_line(&mut line))
        .await
        .expect("an answer in time")
        .expect("reads");
    (line, reader)
}

/// `GET /api/overview` as the token holder.
async fn overview_of(addr: &str) -> Overview {
    let mut answer = String::new();
    let mut stream = request(addr, "/api/overview").await;
    tokio::time::timeout(PATIENCE, stream.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .expect("reads");
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    serde_json::from_str(body).expect("an overview")
}

/// The first overview of the host at `addr` that `done` accepts, within [`PATIENCE`].
async fn overview_until(addr: &str, what: &str, done: impl Fn(&Overview) -> bool) -> Overview {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let overview = overview_of(addr).await;
        if done(&overview) {
            return overview;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}, in time: {:?}",
            overview.batches
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_overview_shows_each_queue_with_its_depths_and_each_job_type_with_its_schedule() {
    let stop = CancellationToken::new();
    let addr = host(&stop).await;
    let overview = overview_of(&addr).await;
    let queue = &overview.queues[0];
    assert_eq!(
        (queue.name.as_str(), queue.ready, queue.held, queue.dead),
        ("work", Some(0), Some(0), Some(1))
    );
    let job = &overview.jobs[0];
    assert_eq!(job.job_type, "jobs.Work");
    let waits: Vec<u64> = job
        .schedule
        .iter()
        .map(|row| row.computed_wait_ms)
        .collect();
    assert_eq!(
        waits,
        [2000],
        "a fixed wait of 2 s after every failed attempt"
    );
    assert_eq!(overview.plugins[0].name, "worker");
    stop.cancel();
}

/// A batch of `members` `jobs.Work` jobs with `jobs.Work` callbacks on success and on
/// death.
fn batch_of(members: usize) -> BatchRequest {
    let job = serde_json::json!({"job_type": "jobs.Work", "payload": {}});
    serde_json::from_value(serde_json::json!({
        "jobs": vec![job; members],
        "on_success": "jobs.Work",
        "on_death": "jobs.Work",
    }))
    .expect("a batch request")
}

#[tokio::test]
async fn the_overview_shows_the_newest_batches_with_their_counts_and_each_callback_once_fired() {
    let (backend, stop) = (MemoryBackend::new(), CancellationToken::new());
    let addr = host_on(&backend, &stop).await;
    let client = AdminClient::new(addr.as_str()).with_token(TOKEN);
    let opened = client.open_batch(&batch_of(2)).await.expect("opened");
    let dead = BatchRecord::End {
        batch: opened.batch_id,
        job_id: opened.job_ids[0],
        end: MemberEnd::Dead,
    };
    backend.record_batch(&dead).await.expect("recorded");
    let on_death = callback_job_id(opened.batch_id, Callback::OnDeath);
    let overview = overview_until(&addr, "the batch with its on_death fired", |o| {
        o.batches
            .first()
            .is_some_and(|b| b.callbacks.iter().any(|c| c.fired.is_some()))
    })
    .await;
    let shown = &overview.batches[0];
    assert_eq!(shown.batch_id, opened.batch_id);
    assert_eq!(
        (shown.total, shown.completed, shown.dead, shown.pending),
        (2, 0, 1, 1),
        "one member dead, one pending, of two"
    );
    let callbacks: Vec<(&str, &str, Option<uuid::Uuid>)> = shown
        .callbacks
        .iter()
        .map(|c| (c.callback.as_str(), c.job_type.as_str(), c.fired))
        .collect();
    assert_eq!(
        callbacks,
        [
            ("on_success", "jobs.Work", None),
            ("on_death", "jobs.Work", Some(on_death)),
        ],
        "on_death fired at the first dead member, on_success waits"
    );

    let mut newest = opened.batch_id;
    for _ in 0..BATCHES_SHOWN {
        newest = client
            .open_batch(&batch_of(1))
            .await
            .expect("opened")
            .batch_id;
    }
    let overview = overview_until(&addr, "the newest batch first", |o| {
        o.batches.first().is_some_and(|b| b.batch_id == newest)
    })
    .await;
    assert_eq!(
        overview.batches.len(),
        BATCHES_SHOWN,
        "an overview carries a bounded number of batches"
    );
    assert!(
        overview
            .batches
            .iter()
            .all(|b| b.batch_id != opened.batch_id),
        "the oldest batch is left out"
    );
    stop.cancel();
}

#[tokio::test]
async fn an_open_event_stream_sends_overviews_and_ends_when_the_host_shuts_down() {
    let stop = CancellationToken::new();
    let addr = host(&stop).await;
    let mut lines = BufReader::new(request(&addr, "/api/events").await).lines();
    let first_event = async {
        while let Some(line) = lines.next_line().await.expect("reads") {
            if line == "event: overview" {
                return lines.next_line().await.expect("reads").expect("its data");
            }
        }
        panic!("the stream ended before its first overview");
    };
    let data = tokio::time::timeout(PATIENCE, first_event)
        .await
        .expect("an overview in time");
    let overview: Overview =
        serde_json::from_str(data.strip_prefix("data: ").expect("a data line")).expect("JSON");
    assert_eq!(overview.queues[0].name, "work");

    stop.cancel();
    let ended = async { while lines.next_line().await.expect("reads").is_some() {} };
    tokio::time::timeout(PATIENCE, ended)
        .await
        .expect("the stream ends at shutdown");
}

#[tokio::test]
async fn each_session_follows_the_host_in_pages_of_its_own_so_none_takes_every_slot() {
    let stop = CancellationToken::new();
    let addr = host(&stop).await;
    let token = format!("Authorization: Bearer {TOKEN}");
    let mut open = Vec::new();
    for _ in 0..MAX_STREAMS_PER_CALLER {
        let (line, stream) = status_line(request_as(&addr, "/api/events", &token).await).await;
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        open.push(stream);
    }
    let (line, _) = status_line(request_as(&addr, "/api/events", &token).await).await;
    assert!(
        line.starts_with("HTTP/1.1 503"),
        "one caller's pages are capped: {line}"
    );

    let link = AdminClient::new(&addr)
        .with_token(TOKEN)
        .login_link()
        .await
        .expect("a login link");
    let path = link.split_once(&addr).expect("the address").1;
    let (line, mut login) = status_line(request_as(&addr, path, "X-Nothing: 1").await).await;
    assert!(line.starts_with("HTTP/1.1 303"), "{line}");
    let mut answer = String::new();
    login.read_to_string(&mut answer).await.expect("reads");
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let (line, _stream) =
        status_line(request_as(&addr, "/api/events", &format!("Cookie: {cookie}")).await).await;
    assert!(
        line.starts_with("HTTP/1.1 200"),
        "a session has slots of its own: {line}"
    );

    drop(open.pop());
    let freed = async {
        loop {
            let (line, stream) = status_line(request_as(&addr, "/api/events", &token).await).await;
            if line.starts_with("HTTP/1.1 200") {
                return stream;
            }
        }
    };
    let _again = tokio::time::timeout(PATIENCE, freed)
        .await
        .expect("a closed page gives its slot back");
    stop.cancel();
}

/// The whole answer to `METHOD path` sent with the host's token.
async fn call(addr: &str, method: &str, path: &str) -> String {
    send(addr, method, path, "").await
}

/// `method path` with the JSON `body`, as the token holder: the whole answer.
async fn send(addr: &str, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("sends");
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, stream.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .expect("reads");
    answer
}

#[tokio::test]
async fn dead_letters_are_served_only_for_the_queues_of_loaded_plugins() {
    let stop = CancellationToken::new();
    let addr = host(&stop).await;
    for (method, path) in [
        ("GET", "/dead/elsewhere"),
        ("GET", "/dead/work.dead"),
        ("POST", "/dead/elsewhere/replay"),
        ("DELETE", "/dead/elsewhere"),
        (
            "DELETE",
            "/dead/elsewhere/6f9619ff-8b86-4d01-b42d-00c04fc964ff",
        ),
    ] {
        let answer = call(&addr, method, path).await;
        assert!(
            answer.starts_with("HTTP/1.1 404") && answer.contains("not a queue of a loaded plugin"),
            "`{method} {path}` is refused: {answer}"
        );
    }
    let answer = call(&addr, "GET", "/dead/work").await;
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    let listed: jobhost::broker::DeadLetterList = serde_json::from_str(body).expect("a listing");
    assert_eq!(listed.letters.len(), 1, "the plugin's queue is served");
    assert_eq!(listed.letters[0].body, "not an envelope");
    stop.cancel();
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

/// The status code of `POST /jobs` with `body`, sent as the token holder.
async fn post_jobs(addr: &str, body: &str) -> u16 {
    let answer = send(addr, "POST", "/jobs", body).await;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line: {answer}"))
}

#[tokio::test]
async fn any_expires_in_ms_is_a_deadline_and_one_that_is_not_a_u64_is_refused() {
    let (backend, stop) = (MemoryBackend::new(), CancellationToken::new());
    let addr = host_on(&backend, &stop).await;
    let client = AdminClient::new(addr.as_str()).with_token(TOKEN);
    let cases = [
        (None, None),
        (Some(600_000), Some(600_000)),
        (Some(0), Some(0)),
        (Some(u64::MAX), None),
    ];
    for (expires_in_ms, from_now) in cases {
        let before = now_ms();
        let request = EnqueueRequest {
            job_type: "jobs.Work".into(),
            payload: serde_json::json!({}),
            delay_ms: None,
            expires_in_ms,
            unique: None,
            traceparent: None,
        };
        let enqueued = client.enqueue(&request).await.expect("enqueued");
        let after = now_ms();
        match (expires_in_ms, from_now) {
            (None, _) => assert_eq!(enqueued.expires_at_ms, None, "no expiry, no deadline"),
            (_, Some(ms)) => {
                let deadline = enqueued.expires_at_ms.expect("a deadline");
                assert!(
                    (before + ms..=after + ms).contains(&deadline),
                    "{ms} ms from the enqueue: {deadline}"
                );
            }
            (Some(_), None) => assert_eq!(
                enqueued.expires_at_ms,
                Some(u64::MAX),
                "a length past the end of time saturates to a deadline that never comes"
            ),
        }
        let held = backend.pending("work");
        let envelope = held.last().expect("the job is on its queue");
        assert_eq!(envelope.job_id, enqueued.job_id);
        assert_eq!(
            envelope.expires_at_ms,
            enqueued.expires_at_ms.map(Deadline::from_epoch_ms),
            "the envelope carries the deadline the answer names"
        );
    }
    for value in [r#""10m""#, "-1", "1.5", "18446744073709551616"] {
        let body = format!(r#"{{"job_type":"jobs.Work","payload":{{}},"expires_in_ms":{value}}}"#);
        assert_eq!(
            post_jobs(&addr, &body).await,
            422,
            "`{value}` is not a number of milliseconds"
        );
    }
    assert_eq!(
        backend.pending("work").len(),
        4,
        "nothing more was enqueued"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_duplicate_of_a_unique_job_is_refused_409_naming_the_job_that_holds_its_key() {
    let (backend, stop) = (MemoryBackend::new(), CancellationToken::new());
    let addr = host_on(&backend, &stop).await;
    let body = r#"{"job_type":"jobs.Work","payload":{},"delay_ms":60000,
        "unique":{"key":"customer-7","for_ms":600000}}"#;
    let first = send(&addr, "POST", "/jobs", body).await;
    let first: serde_json::Value =
        serde_json::from_str(first.split("\r\n\r\n").nth(1).expect("a body")).expect("json");
    let first = first["job_id"].as_str().expect("a job id").to_owned();
    let again = send(&addr, "POST", "/jobs", body).await;
    assert!(again.starts_with("HTTP/1.1 409"), "{again}");
    let refused: serde_json::Value =
        serde_json::from_str(again.split("\r\n\r\n").nth(1).expect("a body")).expect("json");
    assert_eq!(refused["existing_job_id"].as_str(), Some(first.as_str()));
    let huge = format!(
        r#"{{"job_type":"jobs.Work","payload":{{}},"unique":{{"key":"{}","for_ms":1000}}}}"#,
        "k".repeat(1 << 20)
    );
    assert_eq!(
        post_jobs(&addr, &huge).await,
        400,
        "a key over 1 KiB is refused"
    );
    assert_eq!(
        backend.waiting("work"),
        1,
        "only the first job was enqueued"
    );
    stop.cancel();
}
