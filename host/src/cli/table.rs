//! Human output: tables with aligned columns, and durations as the chapter writes them.

use std::fmt::Write;

use jobhost::text::bounded;

/// Bytes of one cell shown; the rest is cut with a marker.
const CELL_MAX: usize = 200;

/// `headers` and `rows` as a pipe table with padded columns. Cells come from the broker
/// and from plugins (job types, dead-letter reasons), so each is bounded and its control
/// characters escaped: no cell can move the cursor, recolour the terminal or break a row.
pub(super) fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| bounded(cell, CELL_MAX).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        format!("| {} |", padded.join(" | "))
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(w + 2)).collect();
    let _ = write!(out, "\n|{}|", rule.join("|"));
    for row in rows {
        let _ = write!(out, "\n{}", line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `1000` -> `1s`, `300000` -> `300s`, `1500` -> `1.5s`, `250` -> `250ms`.
pub(super) fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        let text = format!("{:.3}", ms as f64 / 1000.0);
        format!("{}s", text.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use jobhost::text::MARKER_MAX;

    use super::*;

    #[test]
    fn durations_read_like_the_chapter() {
        assert_eq!(duration(1000), "1s");
        assert_eq!(duration(300_000), "300s");
        assert_eq!(duration(1500), "1.5s");
        assert_eq!(duration(250), "250ms");
        assert_eq!(duration(0), "0ms");
    }

    #[test]
    fn a_cell_prints_no_control_character_and_no_more_than_its_bound() {
        let reason = format!("evil\u{1b}[2J\r\nforged row {}", "x".repeat(10_000));
        let table = render(&["reason"], &[vec![reason]]);
        assert!(
            !table.contains('\u{1b}') && !table.contains('\r'),
            "{table}"
        );
        assert_eq!(
            table.lines().count(),
            3,
            "one header, one rule, one row: {table}"
        );
        let widest = table.lines().map(str::len).max().unwrap_or(0);
        assert!(
            widest <= CELL_MAX + MARKER_MAX + 4,
            "a line of {widest} bytes"
        );
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let table = render(
            &["a", "long header"],
            &[vec!["wide cell".into(), "x".into()]],
        );
        assert_eq!(
            table,
            "| a         | long header |\n|-----------|-------------|\n| wide cell | x           |"
        );
    }
}
