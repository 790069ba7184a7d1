//! Which characters of untrusted text are shown escaped, and how: the one rule the SDK's
//! reasons and the host's logs, tables and dead-letter reasons share.
//!
//! Text from producers, guests and servers may hold characters that break, forge or
//! disguise the line it is shown on. Escaped, each as a Rust escape (`\n`, `\u{1b}`,
//! `\u{202e}`), so a reader sees that it was there:
//! - control characters (`char::is_control`: `\n`, `\r`, ESC, NUL, DEL, C1 controls);
//! - the line and paragraph separators U+2028 and U+2029, which some viewers and JSON
//!   consumers treat as a new line;
//! - the bidirectional controls U+061C, U+200E, U+200F, U+202A-U+202E and U+2066-U+2069,
//!   which reorder what follows them on screen (a job type that reads backwards);
//! - invisible format characters that hide or smuggle text: U+200B (zero-width space),
//!   U+2060-U+2064, U+206A-U+206F, U+FEFF, U+FFF9-U+FFFB and the tag characters
//!   U+E0000-U+E007F.
//!
//! Kept as they are: every other character, including U+200C and U+200D (zero-width
//! non-joiner and joiner), which shape Arabic and Indic scripts and join emoji and reorder
//! nothing.

/// Whether `c` is shown escaped (see the [module doc](self)).
pub fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// Appends `c` to `out`, escaped when [`is_escaped`] says so: `\n`, `\r`, `\t`, `\0`,
/// else `\u{hex}`.
pub fn push(out: &mut String, c: char) {
    if c.is_control() {
        out.extend(c.escape_debug());
    } else if is_escaped(c) {
        out.extend(c.escape_unicode());
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        for c in text.chars() {
            push(&mut out, c);
        }
        out
    }

    #[test]
    fn control_characters_become_rust_escapes() {
        assert_eq!(escaped("a\nb\r\t\u{1b}[31m\0"), r"a\nb\r\t\u{1b}[31m\0");
    }

    #[test]
    fn separators_bidi_controls_and_invisible_format_characters_are_escaped() {
        assert_eq!(
            escaped("a\u{2028}b\u{2029}c"),
            r"a\u{2028}b\u{2029}c",
            "line and paragraph separators"
        );
        for c in ('\u{202A}'..='\u{202E}')
            .chain('\u{2066}'..='\u{2069}')
            .chain(['\u{200E}', '\u{200F}', '\u{061C}'])
        {
            assert_eq!(
                escaped(&format!("x{c}y")),
                format!("x\\u{{{:x}}}y", u32::from(c)),
                "bidi control U+{:04X}",
                u32::from(c)
            );
        }
        for c in ['\u{200B}', '\u{2060}', '\u{FEFF}', '\u{E0041}'] {
            assert!(is_escaped(c), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn letters_of_every_script_and_emoji_joiners_are_kept() {
        let kept = "café Ελληνικά עברית عربي नमस्ते 👩\u{200D}💻 \u{200C}";
        assert_eq!(escaped(kept), kept);
    }
}
