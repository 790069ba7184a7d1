//! Broken plugin files handed to a running host process: each is refused with a log
//! line naming the file and why, and the loaded `ledger` version keeps serving, even
//! when its own file is overwritten with a truncated copy.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobhost::broker::RabbitMqBackend;

use crate::support::faults::ledger::{self, Ledger};
use crate::support::faults::process::HostProcess;
use crate::support::faults::table::Row;

/// How long a dropped file may take to be noticed, compiled and refused.
const REFUSAL: Duration = Duration::from_secs(60);
/// The smallest valid core module: a component host must refuse it.
const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// The broken files, by name, with their contents.
fn broken_files() -> Vec<(&'static str, Vec<u8>)> {
    let ledger = std::fs::read(jobhost_fixtures::wasm("ledger")).expect("the ledger fixture");
    let fixture = |name| std::fs::read(jobhost_fixtures::wasm(name)).expect("a fixture");
    vec![
        (
            "random.wasm",
            (0..4096).map(|_| rand::random::<u8>()).collect(),
        ),
        ("core-module.wasm", CORE_MODULE.to_vec()),
        ("other-world.wasm", fixture("other-world")),
        ("old-version.wasm", fixture("old-version")),
        ("truncated.wasm", ledger[..ledger.len() / 2].to_vec()),
        // Last: the serving plugin's own file, so a refusal here must keep it serving.
        ("ledger.wasm", ledger[..ledger.len() / 3].to_vec()),
    ]
}

pub(crate) async fn run(
    host: &HostProcess,
    dir: &Path,
    ledger: &mut Ledger,
    backend: &Arc<RabbitMqBackend>,
    jobs: usize,
) -> Row {
    let files = broken_files();
    for (name, bytes) in &files {
        let seen = host.line_count();
        // Written beside the directory and renamed in, as a deploy should, so the host
        // sees the whole file at once and the refusal is the file's, not a half copy's.
        let staged = dir.with_extension(format!("staged-{name}"));
        std::fs::write(&staged, bytes).expect("the broken file is written");
        std::fs::rename(&staged, dir.join(name)).expect("the broken file moves in");
        let refused = host
            .wait_for_line(seen, REFUSAL, |l| l.contains("refused") && l.contains(name))
            .await;
        println!("refused {name}: {}", refusal_reason(&refused));
    }

    let ids = ledger::fresh_ids(jobs);
    let queues = ledger.queues().clone();
    let envelopes = ids.iter().map(|&id| queues.work(id, 0)).collect();
    ledger::publish_all(backend, envelopes).await;
    ledger
        .wait_for_all(
            &ids,
            Duration::from_secs(60) + Duration::from_millis(20) * ids.len() as u32,
            "the loaded version to serve after the broken files",
        )
        .await;
    let dead = ledger.take_dead();
    let scenario = format!("d: {} broken plugin files refused", files.len());
    let row = ledger.row(&scenario, &ids, &dead);
    assert!(
        row.dead.is_empty() && row.duplicated == 0,
        "the serving version completes every job once: {row:?}"
    );
    row
}

/// The log line from its `error=` field on, which is where the host says why.
fn refusal_reason(line: &str) -> &str {
    line.find("error=").map_or(line, |at| &line[at..])
}
