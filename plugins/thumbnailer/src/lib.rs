//! Example plugin: grayscale thumbnails, and a follow-up job to publish them.
//!
//! - `thumbnail.MakeThumbnail` on `examples.images` (3 attempts, fixed 1s): converts a
//!   small RGB image to grayscale, shrinks it by `factor` (default 2), logs it as ASCII
//!   art, and enqueues `thumbnail.PublishThumbnail` with the result through
//!   [`JobContext::enqueue`]. A pixel array that does not match `width` x `height` is fatal.
//! - `thumbnail.PublishThumbnail` on `examples.thumbnails`: logs the published thumbnail.

mod image;

use jobhost_sdk::{Job, JobContext, JobError, Level, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "examples")]
enum ImageQueues {
    #[queue(retry(max_attempts = 3, backoff = "fixed", delay = "1s"))]
    Images,
    Thumbnails,
}

/// An RGB image, row-major, to shrink by `factor`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "thumbnail.MakeThumbnail", queue = ImageQueues::Images)]
struct MakeThumbnail {
    name: String,
    width: u32,
    height: u32,
    pixels: Vec<[u8; 3]>,
    #[serde(default = "MakeThumbnail::default_factor")]
    factor: u32,
}

impl MakeThumbnail {
    const fn default_factor() -> u32 {
        2
    }
}

/// A finished grayscale thumbnail, row-major.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "thumbnail.PublishThumbnail", queue = ImageQueues::Thumbnails)]
struct PublishThumbnail {
    name: String,
    width: u32,
    height: u32,
    gray: Vec<u8>,
}

fn make_thumbnail(job: MakeThumbnail, ctx: &JobContext) -> Result<(), JobError> {
    let thumb =
        image::thumbnail(&job.pixels, job.width, job.height, job.factor).ok_or_else(|| {
            JobError::fatal(format!(
                "image `{}` has {} pixels, not {}x{}, or a zero factor",
                job.name,
                job.pixels.len(),
                job.width,
                job.height
            ))
        })?;
    let size = format!("{}x{}", thumb.width, thumb.height);
    ctx.log(
        Level::Info,
        "thumbnail made",
        &[("image", &job.name), ("size", &size)],
    );
    for row in image::ascii_art(&thumb) {
        ctx.info(&format!("|{row}|"));
    }
    let follow_up = PublishThumbnail {
        name: job.name,
        width: thumb.width,
        height: thumb.height,
        gray: thumb.pixels,
    };
    // A refused follow-up is worth another attempt: the host may accept it next time.
    let id = ctx
        .enqueue(&follow_up)
        .map_err(|e| JobError::retryable(e.to_string()))?;
    ctx.log(Level::Info, "publish enqueued", &[("job_id", &id)]);
    Ok(())
}

fn publish_thumbnail(job: PublishThumbnail, ctx: &JobContext) -> Result<(), JobError> {
    let mean = job.gray.iter().map(|&p| u64::from(p)).sum::<u64>() / job.gray.len().max(1) as u64;
    let size = format!("{}x{}", job.width, job.height);
    let mean = mean.to_string();
    ctx.log(
        Level::Info,
        "thumbnail published",
        &[("image", &job.name), ("size", &size), ("mean_luma", &mean)],
    );
    Ok(())
}

jobhost_sdk::plugin!(queues = ImageQueues, jobs = {
    MakeThumbnail => make_thumbnail,
    PublishThumbnail => publish_thumbnail,
});
