//! `jobhost queue pause|resume QUEUE` and `jobhost job cancel ID`: operator orders to the
//! whole fleet, through the running host's admin API, or with `--amqp` straight to the
//! broker (no host needed).
//!
//! The order records who gave it: `--by NAME`, else `$USER@hostname`, either checked as an
//! [`Operator`] (bounded, no control characters) before anything is sent.

use anyhow::Context;
use jobhost::admin::api::{Command, Order, OrderRequest};
use jobhost::broker::Control;
use jobhost::job::{Operator, Utc};
use jobhost::text::bounded;
use uuid::Uuid;

use super::ops::{admin_client, connect, print_json};
use super::{JobAction, OrderArgs, QueueAction};

/// `jobhost queue pause|resume QUEUE`.
pub(super) async fn queue(action: QueueAction) -> anyhow::Result<()> {
    let (args, command) = match action {
        QueueAction::Pause { order, queue } => (order, Command::Pause { queue }),
        QueueAction::Resume { order, queue } => (order, Command::Resume { queue }),
    };
    give(&args, command).await
}

/// `jobhost job cancel ID`.
pub(super) async fn job(action: JobAction) -> anyhow::Result<()> {
    let JobAction::Cancel { order, job_id } = action;
    give(&order, Command::Cancel { job_id }).await
}

/// Give `command` to the fleet as `args` say, and say what was done.
async fn give(args: &OrderArgs, command: Command) -> anyhow::Result<()> {
    let by = operator(args.by.as_deref())?;
    let client = &args.client;
    let order = match client.broker.amqp() {
        None => {
            let admin = admin_client(client)?;
            let request = OrderRequest { by };
            match &command {
                Command::Pause { queue } => admin.pause_queue(queue, true, &request).await?,
                Command::Resume { queue } => admin.pause_queue(queue, false, &request).await?,
                Command::Cancel { job_id } => admin.cancel_job(*job_id, &request).await?,
            }
        }
        Some(url) => {
            let order = Order::now(command, by);
            order.check()?;
            connect(&url, client)
                .await?
                .order(&order)
                .await
                .context("the broker did not take the order")?;
            order
        }
    };
    if client.json {
        return print_json(&order);
    }
    let when = Utc(order.at_ms);
    match &order.command {
        Command::Pause { queue } => println!(
            "paused {queue} for the fleet (by {}, at {when}): no host consumes it until \
             `jobhost queue resume {queue}`; running jobs finish",
            order.by
        ),
        Command::Resume { queue } => {
            println!("resumed {queue} for the fleet (by {}, at {when})", order.by);
        }
        Command::Cancel { job_id } => println!(
            "cancelled job {job_id} (by {}, at {when}): interrupted where it runs, or \
             settled as cancelled when delivered; `jobhost dead list QUEUE` shows it",
            order.by
        ),
    }
    Ok(())
}

/// `--by`, else `$USER@hostname`.
fn operator(by: Option<&str>) -> anyhow::Result<Operator> {
    if let Some(by) = by {
        return Operator::new(by).map_err(|reason| anyhow::anyhow!("`--by` is refused: {reason}"));
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".to_owned());
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    // Escaped and cut, because the environment may hold anything; what is left always
    // passes the operator rule.
    let name = bounded(&format!("{user}@{host}"), 80).into_owned();
    Operator::new(&name).map_err(|reason| {
        anyhow::anyhow!("`$USER@hostname` is refused ({reason}); pass `--by NAME`")
    })
}

/// The job id argument.
pub(super) fn job_id(text: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text).map_err(|err| format!("not a job id (a UUID): {err}"))
}
