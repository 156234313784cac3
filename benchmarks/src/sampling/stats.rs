//! [`Stats`]: the samples of one measurement (one round of one implementation) and
//! their median, minimum and maximum.

use crate::error::{Error, Result};

/// The samples of one measurement and their summary.
#[derive(Debug, Clone)]
pub struct Stats {
    /// The median sample.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// Every sample, in the order taken (warm-up excluded).
    pub samples: Vec<f64>,
}

impl Stats {
    /// Summarises `samples`; an error when there are none or one is not finite.
    pub fn new(samples: Vec<f64>) -> Result<Stats> {
        if samples.is_empty() {
            return Err(Error::msg("no samples were taken"));
        }
        if let Some(bad) = samples.iter().find(|v| !v.is_finite()) {
            return Err(Error::msg(format!(
                "a sample is not a finite number: {bad}"
            )));
        }
        Ok(Stats {
            median: median(&samples),
            min: samples.iter().copied().fold(f64::INFINITY, f64::min),
            max: samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            samples,
        })
    }

    /// The same measurement in another unit: every figure mapped by `f` (which must be
    /// monotonic; a decreasing `f` swaps min and max).
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Stats {
        let (a, b) = (f(self.min), f(self.max));
        Stats {
            median: f(self.median),
            min: a.min(b),
            max: a.max(b),
            samples: self.samples.iter().map(|&v| f(v)).collect(),
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count); NaN when
/// there are none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Stats::new(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Stats::new(vec![4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.samples, vec![4.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn empty_or_nan_samples_are_errors() {
        assert!(Stats::new(vec![]).is_err());
        assert!(Stats::new(vec![1.0, f64::NAN]).is_err());
    }

    #[test]
    fn map_to_a_decreasing_unit_swaps_min_and_max() {
        let s = Stats::new(vec![1.0, 2.0, 4.0]).unwrap().map(|t| 8.0 / t);
        assert_eq!((s.median, s.min, s.max), (4.0, 2.0, 8.0));
    }
}
