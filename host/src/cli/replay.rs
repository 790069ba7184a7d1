//! `jobhost replay`: play a recorded attempt again, offline, with the plugin version that
//! ran it or another one (docs/replay.md).
//!
//! The recording comes from the running host's admin API (`JOB_ID`, the last attempt
//! unless `--attempt`), or from a file `--save` wrote (`--file`). The plugin is `--plugin`,
//! else the file of the plugin directory whose sha256 is the recorded one. The replay runs
//! in this process, on the recording alone: no broker, no network, no secret.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use jobhost::admin::MAX_RECORDINGS_ASKED;
use jobhost::files::{self, Rules};
use jobhost::job::Recording;
use jobhost::job::recording::RECORDING_MAX_BYTES;
use jobhost::plugin::{DEFAULT_MAX_PLUGIN_SIZE, Engine, EngineConfig, Plugin, Replayed};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::ClientArgs;
use super::ops::admin_client;
use super::table::render;

/// A recording file read at most: its answers are at most [`RECORDING_MAX_BYTES`], and
/// JSON escaping and hex bodies can more than double them.
const RECORDING_FILE: Rules =
    Rules::capped(4 * RECORDING_MAX_BYTES as u64 + (1 << 20), "a recording");

/// A plugin file read to compare its digest, at most the host's default plugin size.
const PLUGIN_FILE: Rules = Rules::capped(DEFAULT_MAX_PLUGIN_SIZE, "a plugin");

/// `jobhost replay`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct ReplayArgs {
    /// The job whose recorded attempt to replay, as the running host keeps it.
    #[arg(value_name = "JOB_ID", required_unless_present_any = ["file", "queue"])]
    job_id: Option<Uuid>,
    /// Replay the recorded attempt of every dead letter of QUEUE (its `QUEUE.dead`, up to
    /// `--limit`) against `--plugin`, and print a table of what the new version does.
    #[arg(long, value_name = "QUEUE", conflicts_with_all = ["job_id", "file", "save"], requires = "plugin")]
    queue: Option<String>,
    /// Dead letters replayed at most with `--queue`.
    #[arg(long, value_name = "N", default_value_t = 100)]
    limit: usize,
    /// Which attempt (default: the last one kept).
    #[arg(long, value_name = "N")]
    attempt: Option<u32>,
    /// Replay the recording in FILE instead of asking the host.
    #[arg(long, value_name = "FILE", conflicts_with = "job_id")]
    file: Option<PathBuf>,
    /// Write the recording to FILE and replay nothing.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Run this plugin file against the recording instead of the recorded version.
    #[arg(long, value_name = "FILE")]
    plugin: Option<PathBuf>,
    /// Where to look for the recorded version.
    #[arg(long = "plugins", value_name = "DIR", default_value = "plugins")]
    dir: PathBuf,
    /// Print each import call with the answer it got.
    #[arg(long)]
    trace: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `jobhost replay JOB_ID | --file FILE | --queue QUEUE [--plugin FILE] [--trace] [--save FILE]`.
pub(super) async fn run(args: ReplayArgs) -> anyhow::Result<()> {
    if let Some(queue) = &args.queue {
        return replay_queue(&args, queue).await;
    }
    let recording = recording(&args).await?;
    if let Some(save) = &args.save {
        let json = serde_json::to_vec_pretty(&recording)?;
        std::fs::write(save, json).with_context(|| format!("cannot write {}", save.display()))?;
        println!(
            "recording of job {} attempt {} saved to {}",
            recording.job.job_id,
            recording.job.attempt,
            save.display()
        );
        return Ok(());
    }
    let path = match &args.plugin {
        Some(path) => path.clone(),
        None => recorded_version(&args.dir, &recording)?,
    };
    let plugin = load(&path).await?;
    let same_version = *plugin.identity().sha256 == *recording.plugin.sha256;
    let replayed = plugin.replay(&recording).await;
    if args.client.json {
        return super::ops::print_json(&serde_json::json!({
            "job_id": recording.job.job_id,
            "attempt": recording.job.attempt,
            "same_version": same_version,
            "recorded": recording.outcome,
            "replayed": replayed.outcome,
            "divergence": replayed.divergence,
            "log": replayed.log,
            "same_log": replayed.log == recording.log,
            "trace": replayed.trace,
        }));
    }
    print!(
        "{}",
        report(&recording, &path, same_version, &replayed, args.trace)
    );
    Ok(())
}

/// `jobhost replay --queue Q --plugin FILE`: every dead letter's last recorded attempt
/// against `FILE`, as a table.
async fn replay_queue(args: &ReplayArgs, queue: &str) -> anyhow::Result<()> {
    let queue = queue.strip_suffix(".dead").unwrap_or(queue);
    let path = args
        .plugin
        .as_ref()
        .expect("clap requires --plugin with --queue");
    let client = admin_client(&args.client)?;
    let letters = client.dead_letters(queue, args.limit).await?;
    let job_ids: Vec<Uuid> = letters.letters.iter().filter_map(|l| l.job_id).collect();
    let mut recordings = Vec::new();
    for page in job_ids.chunks(MAX_RECORDINGS_ASKED) {
        recordings.extend(client.find_recordings(page).await?);
    }
    let plugin = load(path).await?;
    let mut rows = Vec::new();
    let mut report = Vec::new();
    for job_id in &job_ids {
        // The last attempt kept: the one that dead-lettered.
        let Some(recording) = recordings.iter().rev().find(|r| r.job.job_id == *job_id) else {
            rows.push(vec![
                job_id.to_string(),
                "-".into(),
                "no recording kept".into(),
                "-".into(),
            ]);
            continue;
        };
        let replayed = plugin.replay(recording).await;
        let verdict = verdict(recording, &replayed);
        rows.push(vec![
            job_id.to_string(),
            recording.outcome.to_string(),
            verdict.to_owned(),
            replayed
                .divergence
                .clone()
                .unwrap_or_else(|| replayed.outcome.to_string()),
        ]);
        report.push(serde_json::json!({
            "job_id": job_id,
            "recorded": recording.outcome,
            "replayed": replayed.outcome,
            "verdict": verdict,
            "divergence": replayed.divergence,
        }));
    }
    if args.client.json {
        return super::ops::print_json(&report);
    }
    println!(
        "{} dead letters of {queue} replayed against {}",
        job_ids.len(),
        path.display()
    );
    if !rows.is_empty() {
        println!("{}", render(&["Job", "Recorded", "Verdict", "Now"], &rows));
    }
    Ok(())
}

/// What a replay says of a new version: `now completes`, `still fails, same reason`,
/// `fails differently`, or `diverged`.
fn verdict(recording: &Recording, replayed: &Replayed) -> &'static str {
    if replayed.divergence.is_some() {
        "diverged"
    } else if replayed.outcome.kind == "completed" {
        "now completes"
    } else if replayed.outcome == recording.outcome {
        "still fails, same reason"
    } else {
        "fails differently"
    }
}

/// The plugin file at `path`, compiled by an engine of its own with the host's defaults,
/// off the async threads (wasmtime blocks while it compiles).
async fn load(path: &Path) -> anyhow::Result<Plugin> {
    let engine = Engine::new(EngineConfig::default())?;
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || engine.load(&owned))
        .await?
        .with_context(|| format!("cannot load {}", path.display()))
}

/// The recording the arguments name.
async fn recording(args: &ReplayArgs) -> anyhow::Result<Recording> {
    if let Some(file) = &args.file {
        let bytes = files::read(file, &RECORDING_FILE)
            .with_context(|| format!("cannot read {}", file.display()))?;
        return serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a jobhost recording", file.display()));
    }
    let job_id = args.job_id.expect("clap requires JOB_ID without --file");
    let mut kept = admin_client(&args.client)?.recordings(job_id).await?;
    if kept.is_empty() {
        bail!(
            "no recording of job {job_id} is kept: only attempts that did not complete are recorded, \
             on queues that record, and the oldest go first (see docs/replay.md)"
        );
    }
    let chosen = match args.attempt {
        Some(attempt) => kept
            .iter()
            .rposition(|r| r.job.attempt == attempt)
            .with_context(|| {
                let attempts: Vec<String> =
                    kept.iter().map(|r| r.job.attempt.to_string()).collect();
                format!(
                    "no recording of attempt {attempt} of job {job_id}; kept: attempt {}",
                    attempts.join(", ")
                )
            })?,
        None => kept.len() - 1,
    };
    Ok(kept.swap_remove(chosen))
}

/// The file in `dir` whose sha256 is the recorded version's: the plugin's own name first.
fn recorded_version(dir: &Path, recording: &Recording) -> anyhow::Result<PathBuf> {
    let wanted = &recording.plugin.sha256;
    let named = dir.join(format!("{}.wasm", recording.plugin.name));
    let others = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for path in std::iter::once(named).chain(others) {
        let Ok(bytes) = files::read(&path, &PLUGIN_FILE) else {
            continue;
        };
        if hex(&Sha256::digest(&bytes)) == *wanted {
            return Ok(path);
        }
    }
    bail!(
        "the recorded version of plugin `{}` (sha256 {}) is not in {}: pass the file with --plugin",
        recording.plugin.name,
        short(wanted),
        dir.display()
    )
}

/// What a replay prints.
fn report(
    recording: &Recording,
    path: &Path,
    same_version: bool,
    replayed: &Replayed,
    trace: bool,
) -> String {
    use std::fmt::Write as _;
    let job = &recording.job;
    let mut out = String::new();
    let version = if same_version {
        "the recorded version".to_owned()
    } else {
        format!(
            "not the recorded version {}",
            short(&recording.plugin.sha256)
        )
    };
    let _ = writeln!(
        out,
        "job {} ({}) attempt {} on {} ({version})",
        job.job_id,
        job.job_type,
        job.attempt,
        path.display()
    );
    let _ = writeln!(out, "recorded: {}", recording.outcome);
    let _ = writeln!(out, "replayed: {}", replayed.outcome);
    let _ = writeln!(out, "verdict: {}", verdict(recording, replayed));
    if let Some(divergence) = &replayed.divergence {
        let _ = writeln!(out, "diverged: {divergence}");
    }
    let same_log = replayed.log == recording.log;
    let _ = writeln!(
        out,
        "log: {} lines{}",
        replayed.log.len(),
        if same_log {
            ", as recorded"
        } else {
            ", not as recorded"
        }
    );
    for line in &replayed.log {
        let _ = writeln!(out, "  {line}");
    }
    if trace {
        let _ = writeln!(out, "imports: {}", replayed.trace.len());
        for (n, call) in replayed.trace.iter().enumerate() {
            let _ = writeln!(out, "  #{} {call}", n + 1);
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}
