//! `jobhost schedules`: each schedule in force on the running host (its grants file's and
//! its plugins'), who set it, its next tick and its last firings (when, which host, which
//! job, how it ended), through the admin API.

use jobhost::admin::api::ScheduleView;
use jobhost::job::Utc;

use super::ClientArgs;
use super::ops::{admin_client, print_json};
use super::table::{duration, render};

/// `jobhost schedules [--json]`.
pub(super) async fn run(args: ClientArgs) -> anyhow::Result<()> {
    let schedules = admin_client(&args)?.schedules().await?;
    if args.json {
        return print_json(&schedules);
    }
    if schedules.is_empty() {
        println!(
            "no schedule: add a [schedules.\"NAME\"] section to the grants file, or declare one on a job type (see docs/schedules.md)"
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = schedules.iter().map(row).collect();
    println!(
        "{}",
        render(
            &[
                "Schedule",
                "Job type",
                "From",
                "When",
                "Missed",
                "Next",
                "Last fired"
            ],
            &rows
        )
    );
    for schedule in schedules.iter().filter(|s| !s.firings.is_empty()) {
        let firings: Vec<Vec<String>> = schedule
            .firings
            .iter()
            .map(|firing| {
                let ended = firing.ended.as_ref().map_or_else(
                    || "not ended yet".to_owned(),
                    |ended| {
                        format!(
                            "{} on attempt {} on {}",
                            ended.outcome, ended.attempt, ended.host
                        )
                    },
                );
                vec![
                    time(firing.tick_ms),
                    time(firing.at_ms),
                    firing.host.clone(),
                    firing.job_id.to_string(),
                    ended,
                ]
            })
            .collect();
        println!("\n{}: last firings, newest first", schedule.name);
        println!(
            "{}",
            render(&["Tick", "Fired at", "Host", "Job id", "Ended"], &firings)
        );
    }
    Ok(())
}

fn row(schedule: &ScheduleView) -> Vec<String> {
    let when = match (&schedule.cron, &schedule.tz, schedule.every_ms) {
        (Some(cron), tz, _) => format!("cron `{cron}` in {}", tz.as_deref().unwrap_or("UTC")),
        (None, _, Some(every)) => format!("every {}", duration(every)),
        (None, _, None) => "-".to_owned(),
    };
    let next = if schedule.enabled {
        schedule.next_ms.map_or_else(|| "never".to_owned(), time)
    } else {
        "disabled".to_owned()
    };
    let last = schedule.firings.first().map_or_else(
        || "never".to_owned(),
        |firing| format!("{} on {}", time(firing.tick_ms), firing.host),
    );
    vec![
        schedule.name.clone(),
        schedule.job_type.clone(),
        schedule.from.clone(),
        when,
        schedule.missed.clone(),
        next,
        last,
    ]
}

/// A time in milliseconds since the Unix epoch, as RFC 3339 in UTC.
fn time(ms: i64) -> String {
    Utc(u64::try_from(ms).unwrap_or(0)).to_string()
}
