//! The table printed at the end of a run.
//!
//! Per row: each implementation's figure (the median over the rounds of each round's
//! median), ours/raw as the smallest, median and largest of the rounds' ratios, the
//! targets, and the verdict. A row passes when every criterion is met both by the
//! median over the rounds and by the worst round; a miss says which of the two missed.

use std::fmt::Write as _;

use super::format::{fmt_num, fmt_ratio};
use super::results::Report;
use super::row::Row;
use crate::sampling::Rounds;

/// The column titles.
const HEAD: [&str; 12] = [
    "case",
    "measurement",
    "unit",
    "ours",
    "raw",
    "cudarc 1s",
    "cudarc 2s",
    "ours/raw min",
    "median",
    "max",
    "target",
    "verdict",
];

/// The columns that hold numbers (aligned right).
const NUMBERS: std::ops::Range<usize> = 3..10;

/// What the columns and verdicts mean, under the summary line.
const LEGEND: [&str; 4] = [
    "figures: the median over the rounds of each round's median; ours/raw: taken per round from that round's figures, min, median and max over the rounds",
    "PASS: the median and the worst round (the one furthest on the wrong side) both meet the target; MISS (median|worst) says which did not",
    "\"cudarc 1s\" = its default stream (no event tracking), \"cudarc 2s\" = streams of its own (event tracking on)",
    "(goal) = the design's promise, not an issue target",
];

/// The whole table, with its summary line, the notes and the errors.
pub(super) fn render(report: &Report) -> String {
    let lines: Vec<[String; 12]> = report.rows.iter().map(cells).collect();
    let mut width = HEAD.map(str::len);
    for line in &lines {
        for (w, c) in width.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut emit = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(width).enumerate() {
            let pad = " ".repeat(w - c.chars().count());
            if NUMBERS.contains(&i) {
                s.push_str(&pad);
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&pad);
            }
            s.push_str("  ");
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    emit(&HEAD.map(str::to_owned));
    emit(&width.map(|w| "-".repeat(w)));
    for line in &lines {
        emit(line);
    }
    let pass = report.rows.iter().filter(|r| r.verdict() == "PASS").count();
    let miss = report
        .rows
        .iter()
        .filter(|r| r.verdict().starts_with("MISS"))
        .count();
    let rounds = report.rows.iter().map(Row::rounds).max().unwrap_or(0);
    let _ = writeln!(out, "\n{pass} PASS, {miss} MISS over {rounds} round(s)");
    for line in LEGEND {
        let _ = writeln!(out, "{line}");
    }
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for (case, e) in &report.errors {
        let _ = writeln!(out, "ERROR in case {case}: {e}");
    }
    out
}

/// One row's cells.
fn cells(r: &Row) -> [String; 12] {
    let figure = |s: &Option<Rounds>| s.as_ref().map_or("-".to_owned(), |s| fmt_num(s.median()));
    let spread = r.ratio_spread();
    let ratio = |pick: fn(&crate::sampling::Spread) -> f64| {
        spread
            .as_ref()
            .map_or("-".to_owned(), |s| format!("{}x", fmt_ratio(pick(s))))
    };
    let targets: Vec<String> = r
        .checks
        .iter()
        .map(|c| {
            if c.what == "ours/raw" {
                // Its values are the ratio columns.
                c.target_text()
            } else {
                format!("{} (now {})", c.target_text(), c.values_text())
            }
        })
        .collect();
    [
        r.case.to_owned(),
        r.name.clone(),
        r.unit.to_owned(),
        figure(&r.ours),
        figure(&r.raw),
        figure(&r.cudarc1),
        figure(&r.cudarc2),
        ratio(|s| s.min),
        ratio(|s| s.median),
        ratio(|s| s.max),
        if targets.is_empty() {
            "-".to_owned()
        } else {
            targets.join("; ")
        },
        r.verdict(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::check::{Better, Check, Source};
    use crate::report::test_rounds::rounds;

    #[test]
    fn table_lists_every_row_the_ratio_spread_and_the_summary() {
        let mut rep = Report::default();
        let mut r = Row::new("launch", "enqueue, 1 stream", "ns/launch", Better::Lower);
        r.ours = rounds(&[2000.0, 2010.0, 1990.0]);
        r.raw = rounds(&[2000.0, 2000.0, 2000.0]);
        rep.rows.push(r.check_vs_raw(1.03, Source::Issue));
        let t = rep.table();
        assert!(t.contains("enqueue, 1 stream"), "{t}");
        assert!(t.contains("ours/raw min"), "{t}");
        assert!(t.contains("0.995x  1.000x  1.005x"), "{t}");
        assert!(t.contains("PASS"), "{t}");
        assert!(t.contains("1 PASS, 0 MISS over 3 round(s)"), "{t}");
    }

    #[test]
    fn a_check_on_something_else_than_ours_over_raw_shows_its_values() {
        let mut rep = Report::default();
        let mut r = Row::new("pipeline", "4 stream(s)", "%", Better::Higher);
        r.ours = rounds(&[96.0, 94.0]);
        r.raw = rounds(&[95.0, 95.0]);
        rep.rows.push(r.with_check(Check::same_target(
            "ours/bound(UD)",
            vec![0.96, 0.94],
            0.95,
            Better::Higher,
            Source::Issue,
        )));
        let t = rep.table();
        assert!(
            t.contains("ours/bound(UD) >= 0.950 (now median 0.950, worst 0.940)"),
            "{t}"
        );
        assert!(t.contains("MISS (worst)"), "{t}");
        assert!(t.contains("0 PASS, 1 MISS"), "{t}");
    }
}
