//! [`Report`]: everything a run produced (rows, figures, notes, errors), and the time
//! stamp of its header.

use std::fmt::Write as _;

use super::format::fmt_num;
use super::row::{one_line, Row};
use crate::sampling::Spread;

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
        crate::sampling::median(&self.values)
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

    #[test]
    fn utc_now_has_the_iso_shape() {
        let now = utc_now();
        assert_eq!(now.len(), 20);
        assert!(now.starts_with("20"));
        assert!(now.ends_with('Z'));
    }
}
