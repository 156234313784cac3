//! [`Row`]: one line of the table, the same measurement for each implementation, and
//! how it prints as it is measured.

use std::fmt::Write as _;

use super::check::{Better, Check, Source};
use super::format::{fmt_num, fmt_ratio};
use crate::sampling::{per_round_ratio, Rounds, Spread};

/// One line of the table: the same measurement for each implementation, each over the
/// rounds.
#[derive(Debug, Clone)]
pub struct Row {
    /// The case, e.g. `launch`.
    pub case: &'static str,
    /// What was measured, e.g. `enqueue, 1 stream`.
    pub name: String,
    /// Unit of the figures, e.g. `ns/launch`.
    pub unit: &'static str,
    /// Which direction is good.
    pub better: Better,
    /// This library.
    pub ours: Option<Rounds>,
    /// Raw `cudarc::driver::result` calls (or the row's named baseline).
    pub raw: Option<Rounds>,
    /// cudarc's safe API on one stream (its default stream: no event tracking).
    pub cudarc1: Option<Rounds>,
    /// cudarc's safe API with streams of its own (event tracking on).
    pub cudarc2: Option<Rounds>,
    /// Pass/fail criteria; the row passes when all of them pass.
    pub checks: Vec<Check>,
}

impl Row {
    /// The row with `ours` and `raw` (its named baseline) as its figures.
    pub fn figures(self, ours: Option<Rounds>, raw: Option<Rounds>) -> Row {
        Row { ours, raw, ..self }
    }

    /// A row without figures yet.
    pub fn new(
        case: &'static str,
        name: impl Into<String>,
        unit: &'static str,
        better: Better,
    ) -> Row {
        Row {
            case,
            name: name.into(),
            unit,
            better,
            ours: None,
            raw: None,
            cudarc1: None,
            cudarc2: None,
            checks: Vec::new(),
        }
    }

    /// The same row in another unit: every column's samples mapped by `f` (monotonic,
    /// as [`Rounds::map`] requires), e.g. seconds to GB/s.
    pub fn in_unit(mut self, f: impl Fn(f64) -> f64) -> Row {
        for column in [
            &mut self.ours,
            &mut self.raw,
            &mut self.cudarc1,
            &mut self.cudarc2,
        ] {
            *column = column.as_ref().map(|rounds| rounds.map(&f));
        }
        self
    }

    /// ours / raw in each round, from that round's figures, when both exist.
    pub fn ratio(&self) -> Option<Vec<f64>> {
        match (&self.ours, &self.raw) {
            (Some(o), Some(r)) => per_round_ratio(&o.figures(), &r.figures()),
            _ => None,
        }
    }

    /// The smallest, median and largest ours / raw over the rounds.
    pub fn ratio_spread(&self) -> Option<Spread> {
        self.ratio().as_deref().and_then(Spread::of)
    }

    /// The most rounds any implementation of the row has.
    pub fn rounds(&self) -> usize {
        [&self.ours, &self.raw, &self.cudarc1, &self.cudarc2]
            .into_iter()
            .flatten()
            .map(Rounds::count)
            .max()
            .unwrap_or(0)
    }

    /// Adds the criterion `ours/raw` against `target`, in the median over the rounds
    /// and in the worst round (direction from the row).
    pub fn check_vs_raw(self, target: f64, source: Source) -> Row {
        self.check_vs_raw_with_worst(target, target, source)
    }

    /// Adds the criterion `ours/raw` against `median_target` in the median over the
    /// rounds and against `worst_target` in the worst round (direction from the row).
    /// Nothing is added when ours or raw is missing.
    pub fn check_vs_raw_with_worst(
        mut self,
        median_target: f64,
        worst_target: f64,
        source: Source,
    ) -> Row {
        if let Some(per_round) = self.ratio() {
            self.checks.push(Check {
                what: "ours/raw",
                per_round,
                median_target,
                worst_target,
                better: self.better,
                source,
            });
        }
        self
    }

    /// Adds a criterion of another kind (e.g. ours against a bound).
    pub fn with_check(mut self, check: Check) -> Row {
        self.checks.push(check);
        self
    }

    /// `true` when the row has criteria and all of them passed.
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(Check::passed)
    }

    /// `-` without criteria, `PASS`, or `MISS` and what missed: `MISS (worst)`, or with
    /// several criteria `MISS (ours/bound(UD): median, worst)`.
    pub fn verdict(&self) -> String {
        if self.checks.is_empty() {
            return "-".to_owned();
        }
        if self.passed() {
            return "PASS".to_owned();
        }
        let missed: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.passed())
            .map(|c| {
                let parts = c.outcome().missed();
                if self.checks.len() == 1 {
                    parts
                } else {
                    format!("{}: {parts}", c.what)
                }
            })
            .collect();
        format!("MISS ({})", missed.join("; "))
    }
}

/// A row on one line, printed as it is measured.
pub(super) fn one_line(r: &Row) -> String {
    let cell = |label: &str, s: &Option<Rounds>| {
        s.as_ref()
            .map(|s| format!(" {label} {}", fmt_num(s.median())))
            .unwrap_or_default()
    };
    let mut line = format!(
        "{}: {} [{}]:{}{}{}{}",
        r.case,
        r.name,
        r.unit,
        cell("ours", &r.ours),
        cell("raw", &r.raw),
        cell("cudarc-1s", &r.cudarc1),
        cell("cudarc-2s", &r.cudarc2)
    );
    if let Some(s) = r.ratio_spread() {
        let _ = write!(
            line,
            "; ours/raw {}x (min {}, max {} over {} rounds)",
            fmt_ratio(s.median),
            fmt_ratio(s.min),
            fmt_ratio(s.max),
            r.rounds()
        );
    }
    for c in &r.checks {
        let _ = write!(line, "; {} is {}", c.target_text(), c.values_text());
    }
    if !r.checks.is_empty() {
        let _ = write!(line, ": {}", r.verdict());
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_rounds::rounds;

    #[test]
    fn ratio_is_taken_per_round_and_judged_on_median_and_worst() {
        let mut r = Row::new("launch", "enqueue", "ns", Better::Lower);
        r.ours = rounds(&[103.0, 200.0, 101.0]);
        r.raw = rounds(&[100.0, 200.0, 100.0]);
        let r = r.check_vs_raw(1.03, Source::Issue);
        let ratio = r.ratio().unwrap();
        assert!((ratio[0] - 1.03).abs() < 1e-12 && ratio[1] == 1.0);
        let s = r.ratio_spread().unwrap();
        assert_eq!((s.min, s.median), (1.0, 1.01));
        assert_eq!(r.verdict(), "PASS");

        let mut r = Row::new("bandwidth", "h2d", "GB/s", Better::Higher);
        r.ours = rounds(&[99.0, 97.0, 99.0]);
        r.raw = rounds(&[100.0, 100.0, 100.0]);
        assert_eq!(
            r.check_vs_raw(0.98, Source::Issue).verdict(),
            "MISS (worst)"
        );
    }

    #[test]
    fn a_row_with_several_checks_names_the_one_that_missed() {
        let mut r = Row::new("pipeline", "4 streams", "%", Better::Higher);
        r.ours = rounds(&[90.0, 91.0]);
        r.raw = rounds(&[90.0, 90.0]);
        let r = r
            .check_vs_raw(0.98, Source::Issue)
            .with_check(Check::same_target(
                "ours/bound(UD)",
                vec![0.90, 0.91],
                0.95,
                Better::Higher,
                Source::Issue,
            ));
        assert!(!r.passed());
        assert_eq!(r.verdict(), "MISS (ours/bound(UD): median, worst)");
        assert_eq!(Row::new("x", "y", "z", Better::Lower).verdict(), "-");
    }

    #[test]
    fn a_ratio_needs_both_sides_and_equal_round_counts() {
        let mut r = Row::new("x", "y", "z", Better::Lower);
        r.ours = rounds(&[1.0, 2.0]);
        assert!(r.ratio().is_none());
        r.raw = rounds(&[1.0]);
        assert!(r.ratio().is_none());
        let r = r.check_vs_raw(1.03, Source::Goal);
        assert!(r.checks.is_empty());
        assert_eq!(r.rounds(), 2);
    }
}
