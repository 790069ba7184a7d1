//! Example plugin: grayscale thumbnails, and a follow-up job to publish them.
//!
//! - `thumbnail.MakeThumbnail` on `examples.images` (3 attempts, fixed 1s): converts a
//!   small RGB image to grayscale, shrinks it by `factor` (default 2), logs it as ASCII
//!   art, and enqueues `thumbnail.PublishThumbnail` with the result through
//!   [`JobContext::enqueue`]. A pixel array that does not match `width` x `height` is fatal.
//! - `thumbnail.PublishThumbnail` on `examples.thumbnails`: logs the published thumbnail.

mod image;

use jobhost_sdk::prelude::*;
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
    let id = ctx.enqueue(&follow_up).retryable()?;
    ctx.log(Level::Info, "publish enqueued", &[("job_id", &id)]);
    Ok(())
}

fn publish_thumbnail(job: PublishThumbnail, ctx: &JobContext) -> Result<(), JobError> {
    let mean = job.gray.iter().map(|&p| u64::from(p)).sum::<u64>() / job.gray.len().max(1) as u64;
    let size = format!("{}x{}", job.width, job.height);
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

#[cfg(test)]
mod tests {
    use jobhost_sdk::testing::TestContext;

    use super::*;

    const BLACK: [u8; 3] = [0, 0, 0];
    const WHITE: [u8; 3] = [255, 255, 255];

    fn checkerboard() -> MakeThumbnail {
        MakeThumbnail {
            name: "board".to_owned(),
            width: 4,
            height: 2,
            pixels: vec![BLACK, WHITE, BLACK, WHITE, WHITE, BLACK, WHITE, BLACK],
            factor: 2,
        }
    }

    #[test]
    fn a_thumbnail_is_logged_and_published_as_a_follow_up() {
        let run = TestContext::new().run(make_thumbnail, checkerboard());
        assert_eq!(run.result, Ok(()));
        let published = run.follow_ups_of::<PublishThumbnail>();
        assert_eq!(published.len(), 1, "one publish job");
        assert_eq!(
            (published[0].width, published[0].height, &published[0].gray),
            (2, 1, &vec![127, 127]),
            "each 2x2 box of the board averages to mid-gray"
        );
        assert_eq!(
            run.messages(),
            ["thumbnail made", "|++|", "publish enqueued"],
            "the size, the ASCII art, then the follow-up's id"
        );
        assert_eq!(run.logs[2].field("job_id"), Some("follow-up-1"));
    }

    #[test]
    fn a_pixel_count_that_does_not_match_the_size_is_fatal() {
        let job = MakeThumbnail {
            width: 3,
            ..checkerboard()
        };
        let run = TestContext::new().run(make_thumbnail, job);
        assert_eq!(
            run.result,
            Err(JobError::fatal(
                "image `board` has 8 pixels, not 3x2, or a zero factor"
            ))
        );
        assert!(run.follow_ups.is_empty());
    }

    #[test]
    fn a_refused_follow_up_is_retried() {
        let run = TestContext::new()
            .refuse_follow_ups("queue unavailable")
            .run(make_thumbnail, checkerboard());
        assert_eq!(
            run.result,
            Err(JobError::retryable(
                "the host refused `thumbnail.PublishThumbnail`: queue unavailable"
            ))
        );
    }

    #[test]
    fn a_published_thumbnail_is_logged_with_its_mean_luma() {
        let job = PublishThumbnail {
            name: "board".to_owned(),
            width: 2,
            height: 1,
            gray: vec![100, 200],
        };
        let run = TestContext::new().run(publish_thumbnail, job);
        assert_eq!(run.result, Ok(()));
        assert_eq!(run.logs[0].field("mean_luma"), Some("150"));
    }
}
