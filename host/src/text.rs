//! Bounding untrusted text before the host puts it anywhere: a log line, a header, a table.
//!
//! Job types, reasons, payload excerpts and everything a guest says come from producers
//! and plugins the host does not trust. Before such a string leaves the host it is cut to a
//! bounded length and the characters that could break or disguise a line are escaped, so
//! one message can neither make the broker refuse a frame nor forge, reorder or garble a
//! log line, a table or a terminal.
//!
//! # Contract
//! - [`bounded`] returns at most `max` bytes plus a marker of at most
//!   [`MARKER_MAX`] bytes; the start of the text is kept, because a reason's cause comes
//!   first.
//! - Control characters (`\n`, `\r`, ESC, every other `char::is_control`), the line and
//!   paragraph separators U+2028/U+2029, bidirectional controls (U+202A-U+202E,
//!   U+2066-U+2069, U+200E, U+200F, U+061C) and invisible format characters become Rust
//!   escapes (`\n`, `\u{1b}`, `\u{202e}`), so the result is one printable line that reads
//!   in the order it was written. The rule is the SDK's ([`jobhost_sdk::text`]), so a
//!   guest's reasons and the host's lines escape the same characters.
//! - Escapes count toward `max`: a text of nothing but escaped characters is still bounded.
//! - A cut is marked `… (N bytes in all)`, with N the length of the original text.

use std::borrow::Cow;
use std::fmt::Write as _;

use jobhost_sdk::text::{is_escaped, push};

/// The longest marker [`bounded`] appends to a cut text.
pub const MARKER_MAX: usize = " … (18446744073709551615 bytes in all)".len();

/// Bytes of a job type, queue name or other identifier shown in a log line or table.
pub const NAME_MAX: usize = 200;

/// Bytes of a reason (dead-letter reason, error message) kept on the wire and in logs.
pub const REASON_MAX: usize = 2 * 1024;

/// Bytes of a reason kept for showing on the dashboard (a dead letter keeps its whole
/// bounded reason).
pub const SHOWN_REASON_MAX: usize = 512;

/// `text` as one printable line of at most `max` bytes plus a marker of at most
/// [`MARKER_MAX`] bytes: control, separator and bidi characters escaped, the end cut and
/// marked.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max && !text.chars().any(is_escaped) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(escape_and_cut(text, max, text.len()))
}

/// [`bounded`] for bytes that may not be UTF-8: invalid sequences become `U+FFFD`. Only
/// the first bytes are decoded, so a huge body costs no more than its excerpt.
pub fn bounded_bytes(bytes: &[u8], max: usize) -> String {
    // A few bytes more than `max`, so a cut is seen as one.
    let excerpt = &bytes[..bytes.len().min(max.saturating_add(4))];
    escape_and_cut(&String::from_utf8_lossy(excerpt), max, bytes.len())
}

/// Escape `text` and cut it at `max` bytes; a cut (or an excerpt of a longer original)
/// is marked with `total`, the original's length.
fn escape_and_cut(text: &str, max: usize, total: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + MARKER_MAX);
    let mut cut = false;
    for c in text.chars() {
        let before = out.len();
        push(&mut out, c);
        if out.len() > max {
            out.truncate(before);
            cut = true;
            break;
        }
    }
    if cut || total > text.len() {
        write!(out, " … ({total} bytes in all)").expect("writing to a String never fails");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_printable_text_is_passed_through_without_a_copy() {
        assert!(matches!(
            bounded("email.Send", 100),
            Cow::Borrowed("email.Send")
        ));
    }

    #[test]
    fn control_characters_are_escaped_into_one_printable_line() {
        let shown = bounded("a\nb\r\u{1b}[31mred\u{0}", 100);
        assert_eq!(shown, "a\\nb\\r\\u{1b}[31mred\\0");
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn separators_and_bidi_controls_are_escaped_so_a_line_reads_as_written() {
        // A job type that would show as `email.Send` followed by a reversed `gpj.exe`, and a
        // reason that would start a new line in a viewer that breaks at U+2028.
        let shown = bounded("email.Send\u{202e}gpj.exe\u{2066}x\u{2069}", 100);
        assert_eq!(shown, "email.Send\\u{202e}gpj.exe\\u{2066}x\\u{2069}");
        let shown = bounded("failed\u{2028}ERROR forged\u{2029}\u{200f}", 100);
        assert_eq!(shown, "failed\\u{2028}ERROR forged\\u{2029}\\u{200f}");
    }

    #[test]
    fn a_text_of_escaped_characters_only_stays_bounded() {
        let text = "\u{202e}".repeat(10_000);
        let shown = bounded(&text, 100);
        assert!(shown.len() <= 100 + MARKER_MAX, "{}", shown.len());
        assert!(shown.ends_with(" … (30000 bytes in all)"), "{shown}");
        assert!(!shown.contains('\u{202e}'), "{shown}");
    }

    #[test]
    fn a_long_text_keeps_its_start_and_says_how_long_it_was() {
        let text = "x".repeat(200_000);
        let shown = bounded(&text, 100);
        assert!(shown.starts_with(&"x".repeat(100)), "{shown}");
        assert!(shown.ends_with(" … (200000 bytes in all)"), "{shown}");
        assert!(shown.len() <= 100 + MARKER_MAX);
    }

    #[test]
    fn a_cut_never_splits_a_character_or_an_escape() {
        let text = "é\n".repeat(100);
        let shown = bounded(&text, 7);
        assert!(shown.starts_with("é\\né"), "{shown}");
        assert!(shown.contains(" … (300 bytes in all)"), "{shown}");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_lossily_and_bounded_with_their_whole_length() {
        assert_eq!(bounded_bytes(b"ok\xff", 10), "ok\u{fffd}");
        let long = vec![b'a'; 10_000];
        let shown = bounded_bytes(&long, 50);
        assert!(shown.starts_with(&"a".repeat(50)), "{shown}");
        assert!(shown.ends_with(" … (10000 bytes in all)"), "{shown}");
    }
}
