//! The results: a table of figures and per-round ratios on stdout (see [`table`]), and
//! every sample of every round in a JSON file written by hand (see [`json_file`]; no
//! serde: the format is small and flat).

mod check;
mod json_file;
mod table;

pub use check::{Better, Check, Source};

use std::fmt::Write as _;

use crate::rounds::{per_round_ratio, Rounds, Spread};
use check::fmt_ratio;

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

/// A free-standing figure (a stage time, a calibration, a bound), measured once or
/// once per round.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The case it belongs to.
    pub case: &'static str,
    /// Its name.
    pub name: String,
    /// Its value, or its value in each round, in order.
    pub values: Vec<f64>,
    /// Its unit.
    pub unit: &'static str,
}

impl Figure {
    /// The value, or the median of the rounds' values.
    pub fn value(&self) -> f64 {
        crate::rounds::median(&self.values)
    }
}

/// Everything a run produced.
#[derive(Debug, Default)]
pub struct Report {
    /// `key: value` lines about the machine and the run.
    pub header: Vec<(String, String)>,
    /// Table rows, in the order measured.
    pub rows: Vec<Row>,
    /// Other figures.
    pub figures: Vec<Figure>,
    /// Remarks printed under the table.
    pub notes: Vec<String>,
    /// Cases that failed, with their error.
    pub errors: Vec<(String, String)>,
}

impl Report {
    /// Records `row` and prints it at once (progress while the run goes on).
    pub fn push(&mut self, row: Row) {
        println!("  {}", one_line(&row));
        self.rows.push(row);
    }

    /// Records a figure measured once and prints it.
    pub fn figure(
        &mut self,
        case: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) {
        self.figure_per_round(case, name, vec![value], unit);
    }

    /// Records a figure with a value per round and prints its median and spread.
    pub fn figure_per_round(
        &mut self,
        case: &'static str,
        name: impl Into<String>,
        values: Vec<f64>,
        unit: &'static str,
    ) {
        let f = Figure {
            case,
            name: name.into(),
            values,
            unit,
        };
        let mut line = format!("  {case}: {} = {} {unit}", f.name, fmt_num(f.value()));
        if let (Some(s), true) = (Spread::of(&f.values), f.values.len() > 1) {
            let _ = write!(
                line,
                " (median of {} rounds, {} to {})",
                f.values.len(),
                fmt_num(s.min),
                fmt_num(s.max)
            );
        }
        println!("{line}");
        self.figures.push(f);
    }

    /// Records a remark for under the table.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The table of figures, per-round ratios and verdicts, with the notes and errors.
    pub fn table(&self) -> String {
        table::render(self)
    }

    /// The whole report as JSON, every sample of every round included.
    pub fn json(&self) -> String {
        json_file::render(self)
    }
}

/// A row on one line, printed as it is measured.
fn one_line(r: &Row) -> String {
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

/// A figure with three significant digits or so.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (no time-zone database needed).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Stats;

    /// Rounds of one sample each, with these figures.
    pub(super) fn rounds(figures: &[f64]) -> Option<Rounds> {
        Some(
            Rounds::new(
                figures
                    .iter()
                    .map(|&v| Stats::new(vec![v]).unwrap())
                    .collect(),
            )
            .unwrap(),
        )
    }

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

    #[test]
    fn utc_now_has_the_iso_shape() {
        let now = utc_now();
        assert_eq!(now.len(), 20);
        assert!(now.starts_with("20"));
        assert!(now.ends_with('Z'));
    }
}
