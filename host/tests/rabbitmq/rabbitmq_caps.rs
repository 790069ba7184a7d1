//! Fleet-wide concurrency caps on the real broker (docs/flow-control.md).
//!
//! - Permits through the backend: a permit queue hands out its limit across connections,
//!   is made once when two connections race to make it, drops garbage published into it,
//!   and a closed connection gives its permits back; a hostile key names a short queue.
//! - Two `jobhost run` processes with a cap of 2 on one key: a ledger kept apart from the
//!   hosts (an HTTP server the jobs call, which records when each call starts and ends)
//!   never sees more than 2 calls of the key at once; a host SIGKILLed while it holds both
//!   permits gives them back, and the other host runs the rest.
//! - Rate limits (their own section, at the end): tokens through the backend, refilled at
//!   the rate across connections and by the other connection once the refiller's closes;
//!   a token queue someone else made and filled with garbage; two `jobhost run` processes
//!   that start a queue's jobs at its rate, measured from the ledger, and keep going when
//!   the host that refills is SIGKILLed.
//! - Limits the plugin declares (`probe.Limited`: 2 at once and 20/s per customer,
//!   respecting `Retry-After`), with no grants file limit: two hosts never run more than 2
//!   calls of a customer at once, and a `429` with `Retry-After` to one job holds the
//!   customer's other jobs back on both hosts until then, while another customer's run.
//!
//! Each test runs in a virtual host of its own, deleted at the end with everything in it,
//! so the broker is left as it was found and no other test's hosts take these jobs.

use std::time::{Duration, Instant};

use jobhost::broker::{Backend, Permits, RabbitMqBackend, Tokens};
use jobhost::envelope::Envelope;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::json;
use serde_json::value::RawValue;

use crate::support::cli::{Host, json_of, stdout_of, write_grants};
use crate::support::probe::{
    BUSY_RETRY_AFTER, Call, FETCH, Ledger, QUEUE, completions, fetch, grants_file, rate_of,
    starts_of, until,
};
use crate::support::{
    PATIENCE, Vhost, backend, probe, publish_plainly, raw_channel_at, ready, unique, within,
};

const LIMITED: &str = "probe.Limited";

/// How long jobs wait for a permit between tries (`--retry-granularity`).
const STEP: &str = "100ms";

/// A `jobhost run` on the test's virtual host serving `http-probe`, with `grants`.
fn start_host(vhost: &Vhost, grants: &str) -> Host {
    probe::start_host(&vhost.url, grants, STEP)
}

/// [`start_host`] with a retry granularity of `step`.
fn start_host_stepped(vhost: &Vhost, grants: &str, step: &str) -> Host {
    probe::start_host(&vhost.url, grants, step)
}

/// Whether the broker tests run here; `backend` fails the test if the broker is missing
/// and no skip was asked for.
async fn broker_present() -> bool {
    backend(&unique("caps-probe")).await.is_some()
}

/// Take permits until one is given (and keep it), for at most [`PATIENCE`]: a permit given
/// back is requeued by a task of its own, a moment after its lease is dropped.
async fn take_eventually(backend: &RabbitMqBackend, permits: &Permits, what: &str) {
    within(PATIENCE, what, async {
        loop {
            if let Some(lease) = backend.take_permit(permits).await.expect("a take") {
                return std::mem::forget(lease);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_queue_hands_out_its_limit_across_connections_and_survives_what_is_thrown_at_it() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let (a, b) = (vhost.backend("caps-a").await, vhost.backend("caps-b").await);
    let hostile = format!("\u{0}\r\n\u{202e}{}", "k".repeat(1 << 20));
    let permits = Permits::for_key(FETCH, Some(&hostile), 2, Duration::from_secs(60));
    assert!(permits.name.len() < 64, "{}", permits.name);

    // Two connections reach a new key at once: the queue is made once, with 2 permits.
    let (first, second) = tokio::join!(a.take_permit(&permits), b.take_permit(&permits));
    let first = first.expect("a take").expect("a permit");
    let second = second.expect("a take").expect("a permit");
    assert!(
        a.take_permit(&permits).await.expect("a take").is_none()
            && b.take_permit(&permits).await.expect("a take").is_none(),
        "two permits are all the fleet has, whoever made the queue"
    );

    // Garbage published into the queue never counts as a permit.
    let channel = raw_channel_at(&vhost.url).await;
    for _ in 0..3 {
        publish_plainly(&channel, &permits.name, b"not a permit").await;
    }
    drop(first);
    take_eventually(&b, &permits, "the permit given back by connection a").await;
    assert!(
        a.take_permit(&permits).await.expect("a take").is_none(),
        "the garbage was dropped, not taken as permits"
    );

    // A closed connection gives back what it held: `b` holds both permits now.
    drop(second);
    b.close().await;
    drop(b);
    take_eventually(&a, &permits, "a permit of the closed connection").await;
    take_eventually(&a, &permits, "the other permit of the closed connection").await;
    assert!(a.take_permit(&permits).await.expect("a take").is_none());
    a.close().await;
    drop(a);
    let channel = raw_channel_at(&vhost.url).await;
    within(PATIENCE, "both permits back in the queue", async {
        while ready(&channel, &permits.name).await != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_of_one_host_reaching_a_new_key_at_once_make_its_permits_once() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let host = vhost.backend("caps-one-host").await;
    for key in 0..5 {
        let permits = Permits::for_key(FETCH, Some(&key.to_string()), 3, Duration::from_secs(60));
        let takes = (0..12).map(|_| host.take_permit(&permits));
        let leases: Vec<_> = futures_util::future::join_all(takes)
            .await
            .into_iter()
            .filter_map(|taken| taken.expect("a take answers"))
            .collect();
        assert_eq!(
            leases.len(),
            3,
            "key {key}: twelve takes at once get the three permits and no more"
        );
        assert!(host.take_permit(&permits).await.expect("a take").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_queue_someone_else_made_and_filled_with_garbage_throttles_and_breaks_nothing() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let host = vhost.backend("caps-garbage").await;
    let permits = Permits::for_queue("emails", 2, Duration::from_secs(60));
    let channel = squat(&vhost, &permits.name, 10, b"{\"i am\": \"a permit\"}").await;
    for _ in 0..6 {
        let taken = host.take_permit(&permits).await.expect("a take answers");
        assert!(taken.is_none(), "garbage is never a permit");
    }
    assert_eq!(
        ready(&channel, &permits.name).await,
        0,
        "each take dropped at most limit + 1 garbage messages, and all of them are gone"
    );
}

/// Declare `queue` first, plainly (no arguments), and publish `count` copies of `garbage`
/// into it, as someone else might; the channel, to look at the queue afterwards.
async fn squat(vhost: &Vhost, queue: &str, count: usize, garbage: &[u8]) -> lapin::Channel {
    let channel = raw_channel_at(&vhost.url).await;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("someone declares the queue first");
    for _ in 0..count {
        publish_plainly(&channel, queue, garbage).await;
    }
    channel
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_never_run_more_than_a_keys_cap_and_a_killed_hosts_permits_come_back() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let (ledger, origin) = Ledger::start().await;
    let grants = format!(
        "[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\n\
         [jobs.\"{FETCH}\"]\nconcurrency = {{ key = \"customer\", limit = 2 }}\n"
    );
    let producer = vhost.backend("caps-producer").await;
    let patience = Duration::from_secs(60);

    // Host A takes both permits of key c1 and stalls in them.
    ledger.stall(true);
    let mut a = start_host(&vhost, &grants);
    for i in 0..2 {
        fetch(&producer, &origin, "/stall", "c1", i).await;
    }
    until(patience, "host A to stall in both permits", || {
        ledger.count("/stall", false) == 2
    })
    .await;
    for i in 0..4 {
        fetch(&producer, &origin, "/work", "c1", i).await;
    }
    let b = start_host(&vhost, &grants);
    b.wait_for_line(patience, |l| l.contains("job throttled"));
    let observed = Instant::now();
    until(patience, "a second of throttling on both hosts", || {
        observed.elapsed() > Duration::from_secs(1)
    })
    .await;
    assert_eq!(
        ledger.count("/work", false),
        0,
        "no host runs a job of key c1 while host A holds both permits"
    );

    // SIGKILL host A while it holds them: host B runs the rest.
    ledger.stall(false);
    let killed_at = Instant::now();
    a.signal("KILL", PATIENCE);
    // The dead host's calls never end in the ledger: their connections just dropped.
    let after_kill = |c: &Call| c.started > killed_at;
    until(
        patience,
        "host B to run the four jobs and the two A died in",
        || {
            let ended = |path: &str| {
                ledger
                    .calls()
                    .iter()
                    .filter(|c| after_kill(c) && c.path == path && c.ended.is_some())
                    .count()
            };
            ended("/work") == 4 && ended("/stall") == 2
        },
    )
    .await;
    let came_back = ledger
        .calls()
        .iter()
        .filter(|c| c.started > killed_at)
        .map(|c| c.started - killed_at)
        .min()
        .expect("calls after the kill");
    assert_eq!(
        ledger.most_at_once(Some("c1"), after_kill),
        2,
        "host B runs key c1 two at a time with the permits host A held"
    );
    eprintln!("the first job after the kill started {came_back:?} after SIGKILL");

    // Two live hosts, two keys: each key at most 2 at once, fleet-wide.
    let a = start_host(&vhost, &grants);
    let phase = Instant::now();
    for i in 0..10 {
        fetch(&producer, &origin, "/work", "c1", 10 + i).await;
    }
    for i in 0..4 {
        fetch(&producer, &origin, "/work", "c2", i).await;
    }
    until(patience, "the fleet to run the 14 jobs", || {
        ledger.count("/work", true) == 18
    })
    .await;
    let (c1, c2, all) = ledger.most_at_once_since(phase, "c1", "c2");
    eprintln!(
        "most at once: c1 {c1}, c2 {c2}, both keys {all}; completions: host A {}, host B {}",
        completions(&a),
        completions(&b)
    );
    assert_eq!(c1, 2, "key c1 reaches its cap of 2 and never exceeds it");
    assert!(c2 <= 2, "key c2 never exceeds its cap: {c2}");
    assert!(all > 2, "the keys run side by side: {all}");

    // The cap in force and where it comes from, and a reload of the grants file changes it.
    let from = format!("[jobs.\"{FETCH}\"] in jobhost.toml");
    assert_eq!(
        fetch_cap(&b),
        json!({"limit": 2, "key": "customer", "from": from})
    );
    let table = tokio::task::block_in_place(|| stdout_of(&b.cli(&["plugins"])));
    assert!(
        table.contains(&format!("2 at once per customer ({from})")),
        "{table}"
    );
    let policy = tokio::task::block_in_place(|| stdout_of(&b.cli(&["policy", FETCH])));
    assert!(
        policy.contains(&format!("concurrency: 2 at once per customer ({from})")),
        "{policy}"
    );
    write_grants(&grants_file(&b), &grants.replace("limit = 2", "limit = 3"));
    within(patience, "the reloaded grants file's cap", async {
        while fetch_cap(&b)["limit"] != 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    drop((a, b));
    producer.close().await;
}

/// What `jobhost plugins --json` says of `probe.Fetch`'s cap on `host`.
fn fetch_cap(host: &Host) -> serde_json::Value {
    fetch_field(host, "concurrency")
}

/// What `jobhost plugins --json` says of `probe.Fetch`'s `field` on `host`.
fn fetch_field(host: &Host, field: &str) -> serde_json::Value {
    let plugins = tokio::task::block_in_place(|| json_of(&host.cli(&["plugins", "--json"])));
    plugins[0]["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["name"] == FETCH))
        .map(|job| job[field].clone())
        .unwrap_or_default()
}

// Rate limits (docs/flow-control.md, "Rate limits").

/// Take tokens of `tokens` every 10 ms for `span`, by turns from `backends`; how many came.
async fn tokens_over(backends: &[&RabbitMqBackend], tokens: &Tokens, span: Duration) -> usize {
    let (start, mut taken, mut turn) = (Instant::now(), 0, 0);
    while start.elapsed() < span {
        if backends[turn % backends.len()]
            .take_token(tokens)
            .await
            .expect("a take answers")
        {
            taken += 1;
        }
        turn += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_queue_refills_at_its_rate_across_connections_and_another_takes_over_the_refill() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let (a, b) = (vhost.backend("rate-a").await, vhost.backend("rate-b").await);
    // 10 a second, 2 saved up at most.
    let tokens = Tokens::for_queue("emails", Duration::from_millis(100), 2);
    assert!(
        !a.take_token(&tokens).await.expect("a take"),
        "a new token queue starts empty"
    );
    let span = Duration::from_secs(3);
    let both = tokens_over(&[&a, &b], &tokens, span).await;
    eprintln!("two connections took {both} tokens in {span:?} at 10/s, burst 2");
    assert!(
        (20..=33).contains(&both),
        "about 30 tokens in 3 s at 10/s, never more than burst + rate·t: {both}"
    );
    // The refiller is `a`, the first to take: close it, and `b` refills within a second.
    a.close().await;
    drop(a);
    let alone = tokens_over(&[&b], &tokens, span).await;
    eprintln!("after the refiller's connection closed, the other took {alone} in {span:?}");
    assert!(
        (12..=33).contains(&alone),
        "the other connection refills after at most about a second: {alone}"
    );
    b.close().await;
}

/// Publish `body` with AMQP `type` `kind` to `queue`, as any client of the virtual host can.
async fn publish_typed(channel: &lapin::Channel, queue: &str, kind: &str, body: &[u8]) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            lapin::options::BasicPublishOptions::default(),
            body,
            lapin::BasicProperties::default().with_type(kind.into()),
        )
        .await
        .expect("a publish")
        .await
        .expect("a confirm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_messages_from_a_plain_client_hold_only_when_well_formed_and_the_refill_resumes() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let host = vhost.backend("rate-hold").await;
    // 10 a second, 2 saved up at most; the first take makes this host the leader, which
    // declares the leader queue.
    let tokens = Tokens::for_queue("emails", Duration::from_millis(100), 2);
    let warm = tokens_over(&[&host], &tokens, Duration::from_secs(1)).await;
    assert!(
        warm >= 5,
        "the refill runs, so its leader queue exists: {warm}"
    );
    let leader = format!("{}.leader", tokens.name);
    let channel = raw_channel_at(&vhost.url).await;
    channel
        .confirm_select(Default::default())
        .await
        .expect("confirms");
    // What is no hold: the hold type with a body that is no number, another type with a
    // number, an empty body, bytes that are not UTF-8.
    for (kind, body) in [
        ("jobhost.hold", &b"soon"[..]),
        ("jobhost.hold", b""),
        ("jobhost.hold", b"\xff\xfe"),
        ("something", b"60000"),
    ] {
        for _ in 0..5 {
            publish_typed(&channel, &leader, kind, body).await;
        }
    }
    let span = Duration::from_secs(2);
    let unheld = tokens_over(&[&host], &tokens, span).await;
    eprintln!("after 20 malformed holds, {unheld} tokens in {span:?} at 10/s");
    assert!(
        (12..=23).contains(&unheld),
        "malformed holds hold nothing: {unheld}"
    );

    // A well-formed hold of 1.5 s, from anyone who may publish here, holds the queue.
    publish_typed(&channel, &leader, "jobhost.hold", b"1500").await;
    let held = tokens_over(&[&host], &tokens, Duration::from_millis(1000)).await;
    let after = tokens_over(&[&host], &tokens, Duration::from_secs(3)).await;
    eprintln!("during a 1.5 s hold: {held} tokens in 1 s; after it: {after} in 3 s");
    assert!(
        held <= 2,
        "at most a token published before the hold arrived: {held}"
    );
    assert!(after >= 10, "the refill resumes after the hold: {after}");
    host.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_queue_someone_else_made_and_filled_with_garbage_throttles_and_breaks_nothing() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let host = vhost.backend("rate-garbage").await;
    let tokens = Tokens::for_queue("emails", Duration::from_millis(100), 5);
    // Without the token queue's arguments, so the refiller cannot declare it either.
    let channel = squat(&vhost, &tokens.name, 30, b"{\"i am\": \"a token\"}").await;
    for _ in 0..6 {
        let taken = host.take_token(&tokens).await.expect("a take answers");
        assert!(!taken, "garbage is never a token");
    }
    assert_eq!(
        ready(&channel, &tokens.name).await,
        0,
        "each take dropped at most burst + 1 garbage messages, and all of them are gone"
    );
    host.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_start_jobs_at_their_rate_limit_and_keep_going_when_the_refiller_is_killed() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let (ledger, origin) = Ledger::start().await;
    // Per key of `probe.Fetch`, not on the queue, which its `probe.Report` follow-ups share;
    // no job has a `tenant`, so all of them share the one bucket of jobs without the key.
    let grants = format!(
        "[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\n\
         [jobs.\"{FETCH}\"]\nrate = {{ key = \"tenant\", limit = \"10/s\" }}\n"
    );
    let producer = vhost.backend("rate-producer").await;
    let patience = Duration::from_secs(60);
    let ended = |key: &str| {
        ledger
            .calls()
            .iter()
            .filter(|c| c.key == key && c.ended.is_some())
            .count()
    };

    // Host A alone first, so it is the one that refills the queue's tokens. The default
    // granularity: a job over the limit waits a second (100 ms of rate rounded up).
    let mut a = start_host_stepped(&vhost, &grants, "1s");
    for i in 0..3 {
        fetch(&producer, &origin, "/work", "warm", i).await;
    }
    until(patience, "host A to run 3 jobs", || ended("warm") == 3).await;

    // Two hosts, 60 jobs: the fleet starts them at 10 a second.
    let b = start_host_stepped(&vhost, &grants, "1s");
    for i in 0..60 {
        fetch(&producer, &origin, "/work", "fleet", i).await;
    }
    until(patience, "the fleet to run the 60 jobs", || {
        ended("fleet") == 60
    })
    .await;
    let starts = starts_of(&ledger, "fleet");
    let (most, rate, ahead) = rate_of(&starts, 10, 10.0);
    let (by_a, by_b) = (completions(&a), completions(&b));
    eprintln!(
        "60 jobs at 10/s, burst 10, on two hosts: {:?} from first to last start, \
         {rate:.2}/s past the burst, at most {most} in any one second, at most {ahead:.1} \
         ahead of 10·t; host A completed {by_a}, host B {by_b} (3 warm-up jobs on A)",
        starts[59] - starts[0]
    );
    probe::assert_within_burst_of_ten(ahead, most);
    assert!(
        (8.0..=11.0).contains(&rate),
        "the fleet's rate: {rate:.2}/s"
    );
    assert!(
        by_a > 3 && by_b > 0,
        "both hosts ran jobs: A {by_a}, B {by_b}"
    );

    // The limit in force and where it comes from.
    let from = format!("[jobs.\"{FETCH}\"] in jobhost.toml");
    assert_eq!(
        fetch_field(&b, "rate"),
        json!({
            "limit": "10/s",
            "burst": 10,
            "key": "tenant",
            "respects_retry_after": false,
            "from": from
        })
    );
    let table = tokio::task::block_in_place(|| stdout_of(&b.cli(&["plugins"])));
    assert!(
        table.contains(&format!("10/s, burst 10, per tenant ({from})")),
        "{table}"
    );

    // SIGKILL host A, the refiller: host B takes the refill over and the jobs keep going.
    // The bucket holds at most 10 tokens at the kill, so 30 jobs need 20 refilled by B.
    let killed_at = Instant::now();
    a.signal("KILL", PATIENCE);
    for i in 0..30 {
        fetch(&producer, &origin, "/work", "after", i).await;
    }
    until(patience, "host B to run 30 jobs after the kill", || {
        ended("after") == 30
    })
    .await;
    let starts = starts_of(&ledger, "after");
    let (most, _, ahead) = rate_of(&starts, 10, 10.0);
    let span = starts[29] - starts[0];
    eprintln!(
        "after SIGKILL of the refiller: first job {:?} after the kill, 30 jobs over {span:?} \
         ({:.2}/s past a full bucket), at most {most} in any one second, at most {ahead:.1} \
         ahead of 10·t",
        starts[0] - killed_at,
        20.0 / span.as_secs_f64()
    );
    assert!(
        ahead <= 12.0,
        "the limit holds after the takeover: {ahead:.1} ahead of 10·t"
    );
    drop(b);
    producer.close().await;
}

// Limits the plugin declares (docs/flow-control.md, "Declared by the plugin").

/// Publish a `probe.Limited` job calling `path` for `customer`.
async fn limited(backend: &RabbitMqBackend, origin: &str, path: &str, customer: &str, i: usize) {
    let url = format!("{origin}{path}?key={customer}&i={i}");
    let payload = json!({"url": url, "customer": customer});
    let payload = RawValue::from_string(payload.to_string()).expect("JSON");
    backend
        .publish(&Envelope::new(LIMITED, QUEUE, payload), None)
        .await
        .expect("the job is published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_keep_the_limits_a_plugin_declares_and_a_retry_after_holds_back_its_key() {
    if !broker_present().await {
        return;
    }
    let vhost = Vhost::new("caps");
    let (ledger, origin) = Ledger::start().await;
    // The grants file only lets the plugin reach the ledger: every limit is the plugin's.
    let grants = format!("[plugins.http-probe]\nallowed_outbound_hosts = [\"{origin}\"]\n");
    let producer = vhost.backend("declared-producer").await;
    let patience = Duration::from_secs(60);
    let a = start_host(&vhost, &grants);
    let b = start_host(&vhost, &grants);

    // The declared cap: 2 at once per customer, fleet-wide.
    let phase = Instant::now();
    for i in 0..8 {
        limited(&producer, &origin, "/work", "d1", i).await;
        limited(&producer, &origin, "/work", "d2", i).await;
    }
    until(patience, "the fleet to run the 16 jobs", || {
        ledger.count("/work", true) == 16
    })
    .await;
    let (d1, d2, all) = ledger.most_at_once_since(phase, "d1", "d2");
    eprintln!(
        "declared cap of 2 per customer on two hosts: most at once d1 {d1}, d2 {d2}, both {all}"
    );
    assert!(
        d1 <= 2 && d2 <= 2,
        "no customer over its cap: d1 {d1}, d2 {d2}"
    );
    assert!(all > 2, "the customers run side by side: {all}");

    // A 429 with Retry-After to one job of customer r1 holds r1's other jobs back on both
    // hosts for as long; customer r2's jobs run meanwhile.
    limited(&producer, &origin, "/busy", "r1", 0).await;
    until(patience, "r1's first call", || {
        ledger.count("/busy", true) == 1
    })
    .await;
    let answered = ledger.calls()[ledger.calls().len() - 1].started;
    let deferred = |host: &Host| {
        host.log_lines()
            .iter()
            .any(|l| l.contains("job deferred") && l.contains("Retry-After"))
    };
    until(patience, "the 429 to defer r1's first job", || {
        deferred(&a) || deferred(&b)
    })
    .await;
    for i in 1..6 {
        limited(&producer, &origin, "/busy", "r1", i).await;
        limited(&producer, &origin, "/work", "r2", i).await;
    }
    // r1's calls: the 429, the deferred job's own call after it, and its five others.
    until(patience, "r1's seven calls and r2's five", || {
        let calls = ledger.calls();
        let ended = |key: &str| {
            calls
                .iter()
                .filter(|c| c.key == key && c.ended.is_some())
                .count()
        };
        ended("r1") >= 7 && ended("r2") >= 5
    })
    .await;
    let calls = ledger.calls();
    let r1_later: Vec<Duration> = calls
        .iter()
        .filter(|c| c.key == "r1" && c.started > answered)
        .map(|c| c.started - answered)
        .collect();
    let r2_last = calls
        .iter()
        .filter(|c| c.key == "r2")
        .map(|c| c.started - answered)
        .max()
        .expect("r2's calls");
    eprintln!(
        "after a 429 with Retry-After 2s: r1's next calls {r1_later:?} after it, r2's five \
         all started within {r2_last:?}"
    );
    // A token the leader published in the instant before the hold reached it may still be
    // taken (docs/flow-control.md, "Retry-After"): at most one call inside the wait.
    assert_eq!(
        r1_later.len(),
        6,
        "each job of r1 called once more: {r1_later:?}"
    );
    let early = r1_later.iter().filter(|at| **at < BUSY_RETRY_AFTER).count();
    assert!(
        early <= 1,
        "r1's jobs wait out the Retry-After instead of each calling: {r1_later:?}"
    );
    assert!(
        r2_last < BUSY_RETRY_AFTER,
        "another customer's jobs are not held: {r2_last:?}"
    );

    // Where the limits come from.
    let from = "plugin http-probe";
    let plugins = tokio::task::block_in_place(|| json_of(&a.cli(&["plugins", "--json"])));
    let job = plugins[0]["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["name"] == LIMITED))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        job["concurrency"],
        json!({"limit": 2, "key": "customer", "from": from})
    );
    assert_eq!(
        job["rate"],
        json!({
            "limit": "20/s",
            "burst": 2,
            "key": "customer",
            "respects_retry_after": true,
            "from": from
        })
    );
    drop((a, b));
    producer.close().await;
}
