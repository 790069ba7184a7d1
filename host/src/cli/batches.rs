//! `jobhost enqueue --batch` and `jobhost batches`: opening a batch, and what the running
//! host knows of the fleet's batches, through the admin API (see docs/batches.md).

use anyhow::Context;
use jobhost::batches::{BatchJob, BatchRequest, BatchView};
use jobhost::broker::Callbacks;
use jobhost::job::Utc;

use super::ops::{admin_client, print_json};
use super::table::render;
use super::{BatchesArgs, EnqueueArgs};

/// `jobhost enqueue --batch JOB_TYPE '[PAYLOAD, ...]'`.
pub(super) async fn enqueue(args: EnqueueArgs) -> anyhow::Result<()> {
    let serde_json::Value::Array(payloads) = args.payload else {
        anyhow::bail!("with --batch, the payload is a JSON array: one job per element");
    };
    let request = BatchRequest {
        jobs: payloads
            .into_iter()
            .map(|payload| BatchJob {
                job_type: args.job_type.clone(),
                payload,
            })
            .collect(),
        callbacks: Callbacks {
            on_success: args.on_success,
            on_complete: args.on_complete,
            on_death: args.on_death,
        },
        context: args.context,
    };
    let opened = admin_client(&args.client)?
        .open_batch(&request)
        .await
        .context("cannot open the batch")?;
    if args.client.json {
        return print_json(&opened);
    }
    println!(
        "enqueued {} {} jobs as batch {}",
        opened.job_ids.len(),
        args.job_type,
        opened.batch_id
    );
    Ok(())
}

/// `jobhost batches [BATCH_ID] [--json]`.
pub(super) async fn show(args: BatchesArgs) -> anyhow::Result<()> {
    let client = admin_client(&args.client)?;
    let batches = match args.batch_id {
        Some(id) => vec![client.batch(id).await?],
        None => client.batches().await?,
    };
    if args.client.json {
        return print_json(&batches);
    }
    if batches.is_empty() {
        println!("no batch: `jobhost enqueue --batch JOB_TYPE '[...]'` opens one");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = batches.iter().map(row).collect();
    println!(
        "{}",
        render(
            &[
                "Batch",
                "Opened",
                "Total",
                "Completed",
                "Dead",
                "Pending",
                "Callbacks"
            ],
            &rows
        )
    );
    Ok(())
}

fn row(batch: &BatchView) -> Vec<String> {
    let callbacks: Vec<String> = batch
        .callbacks
        .iter()
        .map(|callback| {
            let state = callback
                .fired
                .map_or_else(|| "not fired".to_owned(), |job| format!("fired as {job}"));
            format!("{} {} ({state})", callback.callback, callback.job_type)
        })
        .collect();
    vec![
        batch.batch_id.to_string(),
        Utc(batch.opened_at_ms).to_string(),
        batch.total.to_string(),
        batch.completed.to_string(),
        batch.dead.to_string(),
        batch.pending.to_string(),
        if callbacks.is_empty() {
            "-".to_owned()
        } else {
            callbacks.join("; ")
        },
    ]
}
