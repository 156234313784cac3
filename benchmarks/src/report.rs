//! The results: a table of medians and ratios on stdout, and every figure (all samples
//! included) in a JSON file written by hand (no serde: the format is small and flat).

use std::fmt::Write as _;

use crate::json::Json;
use crate::measure::Stats;

/// Which direction of a figure is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Times and costs.
    Lower,
    /// Bandwidths, throughputs, efficiencies.
    Higher,
}

/// Where a target comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Stated in issue 6.
    Issue,
    /// The design's promise ("correct use costs what the raw calls cost") with the
    /// tolerance of the nearest issue target; proposed by the benchmark, not the issue.
    Goal,
}

/// A pass/fail criterion on one row: `value` compared with `target`.
#[derive(Debug, Clone)]
pub struct Check {
    /// What is compared, e.g. `ours/raw` or `ours/bound`.
    pub what: &'static str,
    /// The measured value of `what`.
    pub value: f64,
    /// The threshold.
    pub target: f64,
    /// `Lower`: pass when `value <= target`; `Higher`: when `value >= target`.
    pub better: Better,
    /// Where the target comes from.
    pub source: Source,
}

impl Check {
    /// `true` when the criterion is met.
    pub fn passed(&self) -> bool {
        match self.better {
            Better::Lower => self.value <= self.target,
            Better::Higher => self.value >= self.target,
        }
    }

    fn target_text(&self) -> String {
        let op = match self.better {
            Better::Lower => "<=",
            Better::Higher => ">=",
        };
        let tag = match self.source {
            Source::Issue => "",
            Source::Goal => " (goal)",
        };
        format!("{} {op} {}{tag}", self.what, fmt_ratio(self.target))
    }
}

/// One line of the table: the same measurement for each implementation.
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
    pub ours: Option<Stats>,
    /// Raw `cudarc::driver::result` calls.
    pub raw: Option<Stats>,
    /// cudarc's safe API on one stream (its default stream: no event tracking).
    pub cudarc1: Option<Stats>,
    /// cudarc's safe API with streams of its own (event tracking on).
    pub cudarc2: Option<Stats>,
    /// Pass/fail criterion, if the row has one.
    pub check: Option<Check>,
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
            check: None,
        }
    }

    /// ours / raw of the medians, when both exist.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.ours, &self.raw) {
            (Some(o), Some(r)) if r.median != 0.0 => Some(o.median / r.median),
            _ => None,
        }
    }

    /// Adds the criterion `ours/raw` against `target` (direction from the row).
    pub fn check_vs_raw(mut self, target: f64, source: Source) -> Row {
        if let Some(value) = self.ratio() {
            self.check = Some(Check {
                what: "ours/raw",
                value,
                target,
                better: self.better,
                source,
            });
        }
        self
    }

    fn verdict(&self) -> &'static str {
        match &self.check {
            Some(c) if c.passed() => "PASS",
            Some(_) => "MISS",
            None => "-",
        }
    }
}

/// A free-standing figure (a stage time, a calibration, a bound).
#[derive(Debug, Clone)]
pub struct Figure {
    /// The case it belongs to.
    pub case: &'static str,
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
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

    /// Records a free-standing figure and prints it.
    pub fn figure(
        &mut self,
        case: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) {
        let name = name.into();
        println!("  {case}: {name} = {} {unit}", fmt_num(value));
        self.figures.push(Figure {
            case,
            name,
            value,
            unit,
        });
    }

    /// Records a remark for under the table.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The table of medians and ratios.
    pub fn table(&self) -> String {
        let head = [
            "case",
            "measurement",
            "unit",
            "ours",
            "raw",
            "cudarc 1s",
            "cudarc 2s",
            "ours/raw",
            "target",
            "verdict",
        ];
        let cell = |s: &Option<Stats>| s.as_ref().map_or("-".to_owned(), |s| fmt_num(s.median));
        let lines: Vec<[String; 10]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.case.to_owned(),
                    r.name.clone(),
                    r.unit.to_owned(),
                    cell(&r.ours),
                    cell(&r.raw),
                    cell(&r.cudarc1),
                    cell(&r.cudarc2),
                    r.ratio()
                        .map_or("-".to_owned(), |x| format!("{}x", fmt_ratio(x))),
                    r.check.as_ref().map_or("-".to_owned(), |c| {
                        if c.what == "ours/raw" {
                            c.target_text()
                        } else {
                            format!("{} (now {})", c.target_text(), fmt_ratio(c.value))
                        }
                    }),
                    r.verdict().to_owned(),
                ]
            })
            .collect();
        let mut width = head.map(str::len);
        for line in &lines {
            for (w, c) in width.iter_mut().zip(line) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut emit = |cells: &[String]| {
            let mut s = String::new();
            for (i, (c, w)) in cells.iter().zip(width).enumerate() {
                let pad = w - c.chars().count();
                if (3..8).contains(&i) {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                }
                s.push_str("  ");
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        emit(&head.map(str::to_owned));
        emit(&width.map(|w| "-".repeat(w)));
        for line in &lines {
            emit(line);
        }
        let (pass, miss) = self
            .rows
            .iter()
            .fold((0, 0), |(p, m), r| match r.verdict() {
                "PASS" => (p + 1, m),
                "MISS" => (p, m + 1),
                _ => (p, m),
            });
        let _ = writeln!(out, "\n{pass} PASS, {miss} MISS; medians; \"cudarc 1s\" = its default stream (no event tracking), \"cudarc 2s\" = streams of its own (event tracking on); (goal) = the design's promise, not an issue target");
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        for (case, e) in &self.errors {
            let _ = writeln!(out, "ERROR in case {case}: {e}");
        }
        out
    }

    /// The whole report as JSON.
    pub fn json(&self) -> String {
        let stats = |s: &Option<Stats>| match s {
            None => Json::Null,
            Some(s) => Json::Obj(vec![
                ("median".into(), Json::Num(s.median)),
                ("min".into(), Json::Num(s.min)),
                ("max".into(), Json::Num(s.max)),
                ("n".into(), Json::Num(s.samples.len() as f64)),
                (
                    "samples".into(),
                    Json::Arr(s.samples.iter().map(|&v| Json::Num(v)).collect()),
                ),
            ]),
        };
        let rows = self
            .rows
            .iter()
            .map(|r| {
                Json::Obj(vec![
                    ("case".into(), Json::Str(r.case.into())),
                    ("name".into(), Json::Str(r.name.clone())),
                    ("unit".into(), Json::Str(r.unit.into())),
                    (
                        "better".into(),
                        Json::Str(format!("{:?}", r.better).to_lowercase()),
                    ),
                    ("ours".into(), stats(&r.ours)),
                    ("raw".into(), stats(&r.raw)),
                    ("cudarc_1_stream".into(), stats(&r.cudarc1)),
                    ("cudarc_2_streams".into(), stats(&r.cudarc2)),
                    (
                        "ours_over_raw".into(),
                        r.ratio().map_or(Json::Null, Json::Num),
                    ),
                    (
                        "check".into(),
                        r.check.as_ref().map_or(Json::Null, |c| {
                            Json::Obj(vec![
                                ("what".into(), Json::Str(c.what.into())),
                                ("value".into(), Json::Num(c.value)),
                                ("target".into(), Json::Num(c.target)),
                                (
                                    "better".into(),
                                    Json::Str(format!("{:?}", c.better).to_lowercase()),
                                ),
                                (
                                    "source".into(),
                                    Json::Str(format!("{:?}", c.source).to_lowercase()),
                                ),
                                ("passed".into(), Json::Bool(c.passed())),
                            ])
                        }),
                    ),
                ])
            })
            .collect();
        let figures = self
            .figures
            .iter()
            .map(|f| {
                Json::Obj(vec![
                    ("case".into(), Json::Str(f.case.into())),
                    ("name".into(), Json::Str(f.name.clone())),
                    ("value".into(), Json::Num(f.value)),
                    ("unit".into(), Json::Str(f.unit.into())),
                ])
            })
            .collect();
        let doc = Json::Obj(vec![
            (
                "header".into(),
                Json::Obj(
                    self.header
                        .iter()
                        .map(|(k, v)| (k.clone(), Json::Str(v.clone())))
                        .collect(),
                ),
            ),
            ("rows".into(), Json::Arr(rows)),
            ("figures".into(), Json::Arr(figures)),
            (
                "notes".into(),
                Json::Arr(self.notes.iter().map(|n| Json::Str(n.clone())).collect()),
            ),
            (
                "errors".into(),
                Json::Arr(
                    self.errors
                        .iter()
                        .map(|(c, e)| {
                            Json::Obj(vec![
                                ("case".into(), Json::Str(c.clone())),
                                ("error".into(), Json::Str(e.clone())),
                            ])
                        })
                        .collect(),
                ),
            ),
        ]);
        let mut out = String::new();
        doc.write(&mut out, 0);
        out.push('\n');
        out
    }
}

fn one_line(r: &Row) -> String {
    let cell = |label: &str, s: &Option<Stats>| {
        s.as_ref()
            .map(|s| format!(" {label} {}", fmt_num(s.median)))
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
    if let Some(x) = r.ratio() {
        let _ = write!(line, "; ours/raw {}x", fmt_ratio(x));
    }
    if let Some(c) = &r.check {
        let _ = write!(
            line,
            "; {} is {}: {}",
            c.target_text(),
            fmt_ratio(c.value),
            r.verdict()
        );
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

fn fmt_ratio(v: f64) -> String {
    format!("{v:.3}")
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

    fn stats(v: f64) -> Option<Stats> {
        Some(Stats::new(vec![v]).unwrap())
    }

    #[test]
    fn ratio_and_verdict_follow_the_direction() {
        let mut r = Row::new("launch", "enqueue", "ns", Better::Lower);
        r.ours = stats(103.0);
        r.raw = stats(100.0);
        let r = r.check_vs_raw(1.03, Source::Issue);
        assert!((r.ratio().unwrap() - 1.03).abs() < 1e-12);
        assert_eq!(r.verdict(), "PASS");
        let mut r = Row::new("bandwidth", "h2d", "GB/s", Better::Higher);
        r.ours = stats(97.0);
        r.raw = stats(100.0);
        assert_eq!(r.check_vs_raw(0.98, Source::Issue).verdict(), "MISS");
    }

    #[test]
    fn json_escapes_and_writes_nulls() {
        let mut rep = Report::default();
        rep.header
            .push(("device".into(), "a \"quoted\"\nname".into()));
        let mut r = Row::new("x", "y", "z", Better::Lower);
        r.ours = Some(Stats::new(vec![1.5, 2.5]).unwrap());
        rep.rows.push(r);
        rep.figures.push(Figure {
            case: "x",
            name: "inf".into(),
            value: f64::INFINITY,
            unit: "s",
        });
        let j = rep.json();
        assert!(j.contains(r#""device": "a \"quoted\"\nname""#));
        assert!(j.contains(r#""samples": [1.5, 2.5]"#));
        assert!(j.contains(r#""raw": null"#));
        assert!(j.contains(r#""value": null"#));
    }

    #[test]
    fn table_lists_every_row_and_the_summary() {
        let mut rep = Report::default();
        let mut r = Row::new("launch", "enqueue, 1 stream", "ns/launch", Better::Lower);
        r.ours = stats(2000.0);
        r.raw = stats(1990.0);
        rep.rows.push(r.check_vs_raw(1.03, Source::Issue));
        let t = rep.table();
        assert!(t.contains("enqueue, 1 stream"));
        assert!(t.contains("PASS"));
        assert!(t.contains("1 PASS, 0 MISS"));
    }

    #[test]
    fn utc_now_has_the_iso_shape() {
        let now = utc_now();
        assert_eq!(now.len(), 20);
        assert!(now.starts_with("20"));
        assert!(now.ends_with('Z'));
    }
}
