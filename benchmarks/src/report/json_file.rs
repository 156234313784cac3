//! The JSON file: the header, every row with every sample of every round (tagged by
//! round, from 1), the per-round ratios and criteria, the free-standing figures, the
//! notes and the errors.
//!
//! An implementation of a row is `{"median": the median over the rounds of each round's
//! median, "round_figures": [each round's median], "rounds": [{"round": 1, "median",
//! "min", "max", "n", "samples": [...]}, ...]}`, or `null` when it was not measured.

use super::check::{Check, Outcome};
use super::results::{Figure, Report};
use super::row::Row;
use crate::json::Json;
use crate::sampling::{Rounds, Spread};

/// The whole report as a JSON document.
pub(super) fn render(report: &Report) -> String {
    let doc = Json::Obj(vec![
        (
            "header".into(),
            Json::Obj(
                report
                    .header
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::Str(v.clone())))
                    .collect(),
            ),
        ),
        (
            "rows".into(),
            Json::Arr(report.rows.iter().map(row).collect()),
        ),
        (
            "figures".into(),
            Json::Arr(report.figures.iter().map(figure).collect()),
        ),
        (
            "notes".into(),
            Json::Arr(report.notes.iter().map(|n| Json::Str(n.clone())).collect()),
        ),
        (
            "errors".into(),
            Json::Arr(
                report
                    .errors
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

fn numbers(values: &[f64]) -> Json {
    Json::Arr(values.iter().map(|&v| Json::Num(v)).collect())
}

fn lower(value: impl std::fmt::Debug) -> Json {
    Json::Str(format!("{value:?}").to_lowercase())
}

/// One implementation's rounds, every sample included.
fn rounds(r: &Option<Rounds>) -> Json {
    let Some(r) = r else {
        return Json::Null;
    };
    let each = r
        .each()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Json::Obj(vec![
                ("round".into(), Json::Num((i + 1) as f64)),
                ("median".into(), Json::Num(s.median)),
                ("min".into(), Json::Num(s.min)),
                ("max".into(), Json::Num(s.max)),
                ("n".into(), Json::Num(s.samples.len() as f64)),
                ("samples".into(), numbers(&s.samples)),
            ])
        })
        .collect();
    Json::Obj(vec![
        ("median".into(), Json::Num(r.median())),
        ("round_figures".into(), numbers(&r.figures())),
        ("rounds".into(), Json::Arr(each)),
    ])
}

/// A value with one figure per round: its spread and every round's value.
fn per_round(values: Option<&[f64]>) -> Json {
    let Some(values) = values else {
        return Json::Null;
    };
    let spread = Spread::of(values);
    let num = |pick: fn(&Spread) -> f64| spread.as_ref().map_or(Json::Null, |s| Json::Num(pick(s)));
    Json::Obj(vec![
        ("median".into(), num(|s| s.median)),
        ("min".into(), num(|s| s.min)),
        ("max".into(), num(|s| s.max)),
        ("per_round".into(), numbers(values)),
    ])
}

fn check(c: &Check) -> Json {
    let Outcome {
        median_met,
        worst_met,
    } = c.outcome();
    Json::Obj(vec![
        ("what".into(), Json::Str(c.what.into())),
        ("per_round".into(), numbers(&c.per_round)),
        ("median".into(), Json::Num(c.median())),
        ("worst".into(), Json::Num(c.worst())),
        ("median_target".into(), Json::Num(c.median_target)),
        ("worst_target".into(), Json::Num(c.worst_target)),
        ("better".into(), lower(c.better)),
        ("source".into(), lower(c.source)),
        ("median_passed".into(), Json::Bool(median_met)),
        ("worst_passed".into(), Json::Bool(worst_met)),
        ("passed".into(), Json::Bool(median_met && worst_met)),
    ])
}

fn row(r: &Row) -> Json {
    Json::Obj(vec![
        ("case".into(), Json::Str(r.case.into())),
        ("name".into(), Json::Str(r.name.clone())),
        ("unit".into(), Json::Str(r.unit.into())),
        ("better".into(), lower(r.better)),
        ("rounds".into(), Json::Num(r.rounds() as f64)),
        ("ours".into(), rounds(&r.ours)),
        ("raw".into(), rounds(&r.raw)),
        ("cudarc_1_stream".into(), rounds(&r.cudarc1)),
        ("cudarc_2_streams".into(), rounds(&r.cudarc2)),
        ("ours_over_raw".into(), per_round(r.ratio().as_deref())),
        (
            "checks".into(),
            Json::Arr(r.checks.iter().map(check).collect()),
        ),
        ("verdict".into(), Json::Str(r.verdict())),
    ])
}

fn figure(f: &Figure) -> Json {
    Json::Obj(vec![
        ("case".into(), Json::Str(f.case.into())),
        ("name".into(), Json::Str(f.name.clone())),
        ("value".into(), Json::Num(f.value())),
        ("per_round".into(), numbers(&f.values)),
        ("unit".into(), Json::Str(f.unit.into())),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::check::{Better, Source};
    use crate::report::test_rounds::rounds as figures;
    use crate::sampling::Stats;

    #[test]
    fn json_escapes_writes_nulls_and_tags_every_round() {
        let mut rep = Report::default();
        rep.header
            .push(("device".into(), "a \"quoted\"\nname".into()));
        let mut r = Row::new("x", "y", "z", Better::Lower);
        r.ours = Some(
            Rounds::new(vec![
                Stats::new(vec![1.5, 2.5]).unwrap(),
                Stats::new(vec![3.0]).unwrap(),
            ])
            .unwrap(),
        );
        rep.rows.push(r);
        rep.figures.push(Figure {
            case: "x",
            name: "inf".into(),
            values: vec![f64::INFINITY],
            unit: "s",
        });
        let j = rep.json();
        assert!(j.contains(r#""device": "a \"quoted\"\nname""#), "{j}");
        assert!(j.contains(r#""samples": [1.5, 2.5]"#), "{j}");
        assert!(j.contains(r#""round": 2"#), "{j}");
        assert!(j.contains(r#""round_figures": [2, 3]"#), "{j}");
        assert!(j.contains(r#""raw": null"#), "{j}");
        assert!(j.contains(r#""ours_over_raw": null"#), "{j}");
        assert!(j.contains(r#""value": null"#), "{j}");
    }

    #[test]
    fn json_has_the_ratio_per_round_and_each_part_of_a_check() {
        let mut rep = Report::default();
        let mut r = Row::new("bandwidth", "h2d", "GB/s", Better::Higher);
        r.ours = figures(&[99.0, 97.0]);
        r.raw = figures(&[100.0, 100.0]);
        rep.rows.push(r.check_vs_raw(0.98, Source::Issue));
        let j = rep.json();
        assert!(j.contains(r#""per_round": [0.99, 0.97]"#), "{j}");
        assert!(j.contains(r#""median_passed": true"#), "{j}");
        assert!(j.contains(r#""worst_passed": false"#), "{j}");
        assert!(j.contains(r#""verdict": "MISS (worst)""#), "{j}");
    }
}
