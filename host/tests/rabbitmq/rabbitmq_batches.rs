//! Batches on a fleet of `jobhost run` processes on the test broker, counted by a ledger
//! kept apart from the hosts (the `ledger` fixture's records, see
//! `support::faults::ledger`): a batch of 10,000 jobs across two hosts, one SIGKILLed
//! midway and another started, is counted whole and fires `on_success` and `on_complete`
//! exactly once; a batch
//! whose member dead-letters fires `on_death` once and never `on_success`, beside hostile
//! records a plain AMQP client appends to the batch log.
//!
//! Each callback is a `ledger.Done`, which the fixture dead-letters at once (its payload is
//! the batch's, not an id), so its records are the done queue's dead letters under the
//! callback's job id. Each test runs in a virtual host of its own (its own batch log).

use std::time::{Duration, Instant};

use jobhost::admin::AdminClient;
use jobhost::batches::{BatchJob, BatchRequest, BatchView, callback_job_id};
use jobhost::broker::{
    BATCHES_STREAM, BatchRecord, Callback, Callbacks, MemberEnd, RECORD_MAX_BYTES,
};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use uuid::Uuid;

use crate::support;
use crate::support::cli::{Host, json_of, stdout_of};
use crate::support::faults::ledger::{Ledger, LedgerQueues, fresh_ids, patience};
use crate::support::unique;

/// The admin client of `host`, with its token.
fn client(host: &Host) -> AdminClient {
    AdminClient::new(host.admin.clone()).with_token(host.token())
}

/// A batch of one `ledger.Work` per id, failing `fail_times` attempts each.
fn request(ids: &[u64], fail_times: impl Fn(u64) -> u32, callbacks: Callbacks) -> BatchRequest {
    BatchRequest {
        jobs: ids
            .iter()
            .map(|id| BatchJob {
                job_type: "ledger.Work".into(),
                payload: serde_json::json!({"id": id, "fail_times": fail_times(*id)}),
            })
            .collect(),
        callbacks,
        context: Some(serde_json::json!({"report": "nightly"})),
    }
}

/// `host`'s view of `batch` once `done` holds of it, failing after `limit`.
async fn view_once(
    host: &Host,
    batch: Uuid,
    limit: Duration,
    done: impl Fn(&BatchView) -> bool,
) -> BatchView {
    let client = client(host);
    let deadline = Instant::now() + limit;
    loop {
        let view = client.batch(batch).await.ok();
        if let Some(view) = view.filter(|view| done(view)) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "the batch did not get there within {limit:?}: {:?}",
            client.batch(batch).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn fired(view: &BatchView, callback: Callback) -> Option<Uuid> {
    view.callbacks
        .iter()
        .find(|c| c.callback == callback.name())
        .and_then(|c| c.fired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_on_two_hosts_fire_on_success_once_though_one_host_is_killed_midway() {
    if support::backend(&unique("batch-probe")).await.is_none() {
        return;
    }
    let _alone = support::HEAVY.lock().await;
    let queues = LedgerQueues::classic();
    let mut hosts = vec![
        Host::on_broker("ledger", &queues.url, None),
        Host::on_broker("ledger", &queues.url, None),
    ];
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let ids = fresh_ids(10_000);
    let callbacks = Callbacks {
        on_success: Some("ledger.Done".into()),
        on_complete: Some("ledger.Done".into()),
        on_death: Some("ledger.Done".into()),
    };
    // `ledger.Tick`s, which complete and record nothing: the hosts' count is what is
    // under test, and the ledger counts the callbacks.
    let mut request = request(&ids, |_| 0, callbacks);
    for job in &mut request.jobs {
        job.job_type = "ledger.Tick".into();
    }
    let opened = client(&hosts[0])
        .open_batch(&request)
        .await
        .expect("the batch opens");
    assert_eq!(opened.job_ids.len(), ids.len());
    let batch = opened.batch_id;

    // Midway, SIGKILL the host that did not open the batch: whatever it held unacked is
    // delivered again, and what it recorded before it died is in the log.
    let started = Instant::now();
    view_once(&hosts[0], batch, patience(ids.len()), |view| {
        view.completed >= ids.len() / 3
    })
    .await;
    let mut killed = hosts.remove(1);
    tokio::task::block_in_place(|| killed.signal("KILL", Duration::from_secs(10)));
    hosts.push(Host::on_broker("ledger", &queues.url, None));

    let done = |view: &BatchView| {
        view.pending == 0
            && fired(view, Callback::OnSuccess).is_some()
            && fired(view, Callback::OnComplete).is_some()
    };
    let view = view_once(&hosts[0], batch, patience(ids.len()), done).await;
    let drained = started.elapsed();
    assert_eq!((view.total, view.completed, view.dead), (10_000, 10_000, 0));
    assert_eq!(fired(&view, Callback::OnDeath), None, "no member died");
    // A host that starts now reads the whole log, the firings with it, and fires nothing
    // again: by the time it shows both fired, it has decided.
    let late = Host::on_broker("ledger", &queues.url, None);
    let seen_late = view_once(&late, batch, Duration::from_secs(60), done).await;
    assert_eq!(seen_late, view, "every host folds the log alike");

    let on_success = callback_job_id(batch, Callback::OnSuccess);
    let on_complete = callback_job_id(batch, Callback::OnComplete);
    assert_eq!(fired(&view, Callback::OnSuccess), Some(on_success));
    let deadline = Instant::now() + Duration::from_secs(30);
    while ledger.callback_records(on_success) == 0 || ledger.callback_records(on_complete) == 0 {
        assert!(Instant::now() < deadline, "the callbacks' jobs ran");
        ledger.drain().await;
    }
    // What the other hosts could still fire would have been decided before they showed
    // both fired; the late host's decision too. Drain what is in flight, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ledger.drain().await;
    let (succeeded, completed) = (
        ledger.callback_records(on_success),
        ledger.callback_records(on_complete),
    );
    let log = support::rabbitmqctl(&["list_queues", "-p", queues.vhost_name(), "name", "messages"]);
    let records = log
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{BATCHES_STREAM}\t")))
        .unwrap_or("?");
    println!(
        "batch {batch}: 10,000 jobs on two hosts, one SIGKILLed after a third, ended in \
         {drained:?}; the batch log holds {records} records; on_success enqueued {succeeded} \
         time(s), on_complete {completed}"
    );
    assert_eq!(
        (succeeded, completed),
        (1, 1),
        "each callback fires exactly once"
    );

    let table = tokio::task::block_in_place(|| stdout_of(&hosts[1].cli(&["batches"])));
    assert!(
        table.contains(&batch.to_string())
            && table.contains("10000")
            && table.contains(&format!("on_success ledger.Done (fired as {on_success})")),
        "{table}"
    );
    for mut host in hosts.into_iter().chain([late]) {
        tokio::task::block_in_place(|| host.interrupt(Duration::from_secs(30)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_member_dies_fires_on_death_once_and_never_on_success_whatever_strangers_append()
 {
    if support::backend(&unique("batch-probe")).await.is_none() {
        return;
    }
    let queues = LedgerQueues::classic();
    let hosts = [
        Host::on_broker("ledger", &queues.url, None),
        Host::on_broker("ledger", &queues.url, None),
    ];
    let mut ledger = Ledger::open_on(queues.clone()).await;
    let ids = fresh_ids(3);
    let dies = ids[0];
    let callbacks = Callbacks {
        on_success: Some("ledger.Done".into()),
        on_death: Some("ledger.Done".into()),
        ..Callbacks::default()
    };
    let opened = client(&hosts[0])
        .open_batch(&request(
            &ids,
            |id| if id == dies { 5 } else { 0 },
            callbacks,
        ))
        .await
        .expect("the batch opens");
    let batch = opened.batch_id;

    // A stranger on the virtual host appends to the batch log: garbage, a record past the
    // bound, an ending of a job that is no member, an ending of a batch never opened.
    let channel = queues.raw_channel().await;
    let mut stream = FieldTable::default();
    stream.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(BATCHES_STREAM.into(), passive, stream)
        .await
        .expect("the hosts declared the batch log");
    let forged = |batch, job_id| {
        BatchRecord::End {
            batch,
            job_id,
            end: MemberEnd::Dead,
        }
        .encode()
    };
    for body in [
        b"\xff\x00 not json".to_vec(),
        vec![b' '; RECORD_MAX_BYTES + 1],
        forged(batch, Uuid::new_v4()),
        forged(Uuid::new_v4(), opened.job_ids[1]),
    ] {
        channel
            .basic_publish(
                "".into(),
                BATCHES_STREAM.into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }

    let done = |view: &BatchView| view.pending == 0 && fired(view, Callback::OnDeath).is_some();
    let view = view_once(&hosts[1], batch, Duration::from_secs(60), done).await;
    assert_eq!(
        (view.total, view.completed, view.dead),
        (3, 2, 1),
        "{view:?}"
    );
    assert_eq!(fired(&view, Callback::OnSuccess), None);
    ledger
        .wait_for_all(&ids[1..], Duration::from_secs(30), "the members that live")
        .await;
    let on_death = callback_job_id(batch, Callback::OnDeath);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ledger.callback_records(on_death) == 0 {
        assert!(Instant::now() < deadline, "on_death's job ran");
        ledger.drain().await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    ledger.drain().await;
    assert_eq!(ledger.callback_records(on_death), 1, "on_death fires once");
    assert_eq!(
        ledger.callback_records(callback_job_id(batch, Callback::OnSuccess)),
        0,
        "on_success never fires"
    );
    let listed = tokio::task::block_in_place(|| json_of(&hosts[0].cli(&["batches", "--json"])));
    assert_eq!(listed[0]["batch_id"], batch.to_string(), "{listed}");
    assert_eq!(listed[0]["dead"], 1, "{listed}");
    for mut host in hosts {
        tokio::task::block_in_place(|| host.interrupt(Duration::from_secs(30)));
    }
}
