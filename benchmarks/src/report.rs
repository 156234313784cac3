//! The results: a table of figures and per-round ratios on stdout (see [`table`]), and
//! every sample of every round in a JSON file written by hand (see [`json_file`]; no
//! serde: the format is small and flat).

mod check;
mod format;
mod json_file;
mod results;
mod row;
mod table;
#[cfg(test)]
mod test_rounds;

pub use check::{Better, Check, Source};
pub use results::{utc_now, Report};
pub use row::Row;

impl Report {
    /// The table of figures, per-round ratios and verdicts, with the notes and errors.
    pub fn table(&self) -> String {
        table::render(self)
    }

    /// The whole report as JSON, every sample of every round included.
    pub fn json(&self) -> String {
        json_file::render(self)
    }
}
