//! [`Measurement`]: the samplers of one table row, one per column (ours, raw, cudarc's
//! two), measured together by [`interleaved`] and put into the row's columns.
//!
//! A case is then a list of these: which samplers, which row, which target.
//!
//! ```ignore
//! let row = Measurement::new()
//!     .ours("ours, 1 stream", || ours.sample())
//!     .raw("raw, 1 stream", || raw.sample())
//!     .into_row(cfg.plan(3, 300), Row::new("launch", "enqueue", "ns/launch", Better::Lower))?;
//! rep.push(row.check_vs_raw(1.03, Source::Issue));
//! ```

use crate::error::Result;
use crate::report::Row;
use crate::sampling::{interleaved, Plan, Rounds, Sampler};

/// The column of a row a sampler's figures go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Ours,
    Raw,
    Cudarc1,
    Cudarc2,
}

/// The samplers of one row, each with its column.
#[derive(Default)]
pub struct Measurement<'a> {
    samplers: Vec<Sampler<'a>>,
    columns: Vec<Column>,
}

impl<'a> Measurement<'a> {
    /// No samplers yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(
        mut self,
        column: Column,
        label: &'static str,
        sample: impl FnMut() -> Result<f64> + 'a,
    ) -> Self {
        self.samplers.push((label, Box::new(sample)));
        self.columns.push(column);
        self
    }

    /// This library's sampler.
    pub fn ours(self, label: &'static str, sample: impl FnMut() -> Result<f64> + 'a) -> Self {
        self.with(Column::Ours, label, sample)
    }

    /// The raw driver calls' sampler (or the row's named baseline).
    pub fn raw(self, label: &'static str, sample: impl FnMut() -> Result<f64> + 'a) -> Self {
        self.with(Column::Raw, label, sample)
    }

    /// cudarc's safe API on its default stream.
    pub fn cudarc1(self, label: &'static str, sample: impl FnMut() -> Result<f64> + 'a) -> Self {
        self.with(Column::Cudarc1, label, sample)
    }

    /// cudarc's safe API on streams of its own.
    pub fn cudarc2(self, label: &'static str, sample: impl FnMut() -> Result<f64> + 'a) -> Self {
        self.with(Column::Cudarc2, label, sample)
    }

    /// Every sampler's rounds, in the order they were added.
    pub fn rounds(mut self, plan: Plan) -> Result<Vec<Rounds>> {
        interleaved(plan, &mut self.samplers)
    }

    /// Measures every sampler by `plan` and puts each one's rounds into its column of
    /// `row`.
    pub fn into_row(self, plan: Plan, mut row: Row) -> Result<Row> {
        let columns = self.columns.clone();
        for (column, rounds) in columns.into_iter().zip(self.rounds(plan)?) {
            let slot = match column {
                Column::Ours => &mut row.ours,
                Column::Raw => &mut row.raw,
                Column::Cudarc1 => &mut row.cudarc1,
                Column::Cudarc2 => &mut row.cudarc2,
            };
            *slot = Some(rounds);
        }
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Better;

    #[test]
    fn each_sampler_fills_its_own_column() {
        let plan = Plan {
            warmup: 0,
            samples: 1,
            rounds: 2,
        };
        let row = Measurement::new()
            .raw("raw", || Ok(2.0))
            .ours("ours", || Ok(1.0))
            .cudarc2("cudarc 2s", || Ok(4.0))
            .into_row(plan, Row::new("case", "row", "ns", Better::Lower))
            .unwrap();
        let median = |r: &Option<Rounds>| r.as_ref().map(Rounds::median);
        assert_eq!(median(&row.ours), Some(1.0));
        assert_eq!(median(&row.raw), Some(2.0));
        assert_eq!(median(&row.cudarc1), None);
        assert_eq!(median(&row.cudarc2), Some(4.0));
        assert_eq!(row.ratio(), Some(vec![0.5, 0.5]));
    }
}
