//! The pixel work, free of any jobhost type so it is unit-tested natively.

/// A grayscale image, row-major, one byte of luma per pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gray {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) pixels: Vec<u8>,
}

/// The luma of an sRGB pixel (ITU-R BT.601 weights, in integer arithmetic).
pub(crate) fn luma([r, g, b]: [u8; 3]) -> u8 {
    let weighted = 299 * u32::from(r) + 587 * u32::from(g) + 114 * u32::from(b);
    u8::try_from((weighted + 500) / 1000).unwrap_or(u8::MAX)
}

/// `rgb` (`width` x `height`, row-major) in grayscale, shrunk by `factor` in both
/// directions: each output pixel is the mean luma of its `factor` x `factor` box (edge
/// boxes are smaller, so no input pixel is dropped). `None` when `rgb` does not hold
/// `width * height` pixels or `factor` is zero.
pub(crate) fn thumbnail(rgb: &[[u8; 3]], width: u32, height: u32, factor: u32) -> Option<Gray> {
    let expected = usize::try_from(u64::from(width) * u64::from(height)).ok()?;
    if rgb.len() != expected || factor == 0 {
        return None;
    }
    let (out_width, out_height) = (width.div_ceil(factor), height.div_ceil(factor));
    let mut pixels = Vec::with_capacity(expected / (factor as usize).pow(2) + 1);
    for out_y in 0..out_height {
        for out_x in 0..out_width {
            let (mut sum, mut count) = (0u32, 0u32);
            for y in out_y * factor..((out_y + 1) * factor).min(height) {
                for x in out_x * factor..((out_x + 1) * factor).min(width) {
                    sum += u32::from(luma(rgb[(y * width + x) as usize]));
                    count += 1;
                }
            }
            pixels.push(u8::try_from(sum / count).unwrap_or(u8::MAX));
        }
    }
    Some(Gray {
        width: out_width,
        height: out_height,
        pixels,
    })
}

/// `image` as lines of text, darkest pixels as `@`, brightest as space: a thumbnail that
/// reads well in a log.
pub(crate) fn ascii_art(image: &Gray) -> Vec<String> {
    const RAMP: &[u8] = b"@%#*+=-:. ";
    image
        .pixels
        .chunks(image.width as usize)
        .map(|row| {
            row.iter()
                .map(|&p| char::from(RAMP[usize::from(p) * (RAMP.len() - 1) / 255]))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLACK: [u8; 3] = [0, 0, 0];
    const WHITE: [u8; 3] = [255, 255, 255];

    #[test]
    fn luma_weighs_green_most_and_keeps_the_extremes() {
        assert_eq!(luma(BLACK), 0);
        assert_eq!(luma(WHITE), 255);
        assert!(
            luma([0, 255, 0]) > luma([255, 0, 0]),
            "green is brighter than red"
        );
        assert!(
            luma([255, 0, 0]) > luma([0, 0, 255]),
            "red is brighter than blue"
        );
    }

    #[test]
    fn a_thumbnail_averages_each_box() {
        let rgb = [BLACK, WHITE, BLACK, BLACK, WHITE, WHITE, BLACK, BLACK];
        let thumb = thumbnail(&rgb, 4, 2, 2).expect("8 pixels make a 4x2 image");
        assert_eq!(
            thumb,
            Gray {
                width: 2,
                height: 1,
                pixels: vec![191, 0]
            }
        );
    }

    #[test]
    fn edge_boxes_are_smaller_and_no_pixel_is_dropped() {
        let rgb = [WHITE, WHITE, BLACK];
        let thumb = thumbnail(&rgb, 3, 1, 2).expect("3 pixels make a 3x1 image");
        assert_eq!(
            thumb,
            Gray {
                width: 2,
                height: 1,
                pixels: vec![255, 0]
            }
        );
    }

    #[test]
    fn a_pixel_count_that_does_not_match_the_size_is_refused() {
        assert_eq!(thumbnail(&[WHITE; 3], 2, 2, 2), None);
        assert_eq!(
            thumbnail(&[WHITE; 4], 2, 2, 0),
            None,
            "a zero factor is refused"
        );
    }

    #[test]
    fn ascii_art_draws_dark_as_at_signs_and_bright_as_spaces() {
        let image = Gray {
            width: 2,
            height: 2,
            pixels: vec![0, 255, 255, 0],
        };
        assert_eq!(ascii_art(&image), vec!["@ ", " @"]);
    }
}
