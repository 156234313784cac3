//! One implementation's measurement over the `--repeat` rounds, and the spread of a
//! value that has one figure per round (a ratio, a bound).
//!
//! A round's **figure** is the median of that round's samples. The measurement's
//! figure, the one the table prints, is the median of the rounds' figures. Ratios are
//! taken per round, from that round's figures, so that drift between rounds cancels
//! out of them and their spread over the rounds shows the noise of the ratio itself.

use super::plan::Plan;
use super::stats::{median, Stats};
use crate::error::{Error, Result};

/// Every round of one implementation's measurement, in the order taken (at least one).
#[derive(Debug, Clone)]
pub struct Rounds(Vec<Stats>);

impl Rounds {
    /// The rounds `each`, in order; an error when there are none.
    pub fn new(each: Vec<Stats>) -> Result<Rounds> {
        if each.is_empty() {
            return Err(Error::msg("no rounds were taken"));
        }
        Ok(Rounds(each))
    }

    /// The rounds of `samples`, recorded one per sample as `plan` took them (its warm-up
    /// first, then each round's in order), each round's figures made by `stats`; an error
    /// when there are not as many as `plan` takes.
    pub fn from_samples<S>(
        samples: &[S],
        plan: Plan,
        stats: impl Fn(&[S]) -> Result<Stats>,
    ) -> Result<Rounds> {
        let recorded = samples.get(plan.warmup..).unwrap_or_default();
        if recorded.len() != plan.rounds * plan.samples {
            return Err(Error::msg(format!(
                "{} samples recorded after the warm-up, expected {}",
                recorded.len(),
                plan.rounds * plan.samples
            )));
        }
        Rounds::new(
            recorded
                .chunks(plan.samples)
                .map(stats)
                .collect::<Result<_>>()?,
        )
    }

    /// Each round's samples and their summary.
    pub fn each(&self) -> &[Stats] {
        &self.0
    }

    /// How many rounds.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// Each round's figure (its median), in order.
    pub fn figures(&self) -> Vec<f64> {
        self.0.iter().map(|s| s.median).collect()
    }

    /// The measurement's figure: the median of the rounds' figures.
    pub fn median(&self) -> f64 {
        median(&self.figures())
    }

    /// The same measurement in another unit: every sample and figure mapped by `f`
    /// (monotonic, as [`Stats::map`] requires).
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Rounds {
        Rounds(self.0.iter().map(|s| s.map(&f)).collect())
    }

    /// As [`map`](Self::map), with a conversion that differs between rounds: round `r`
    /// (from 0) is mapped by `f(r, value)`, e.g. a time as a percentage of a bound
    /// measured in the same round.
    pub fn map_each_round(&self, f: impl Fn(usize, f64) -> f64) -> Rounds {
        Rounds(
            self.0
                .iter()
                .enumerate()
                .map(|(r, s)| s.map(|v| f(r, v)))
                .collect(),
        )
    }
}

/// The smallest, median and largest of a value that has one figure per round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The smallest.
    pub min: f64,
    /// The median.
    pub median: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none or one is not finite.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        Some(Spread {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            median: median(values),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// `values` as "median (min, max)" with `decimals` decimals, as the printed-only
/// diagnoses show them; "n/a" when [`Spread::of`] has none.
pub fn spread_text(values: &[f64], decimals: usize) -> String {
    match Spread::of(values) {
        Some(s) => format!(
            "{:.d$} ({:.d$}, {:.d$})",
            s.median,
            s.min,
            s.max,
            d = decimals
        ),
        None => "n/a".to_owned(),
    }
}

/// `a[r] / b[r]` for every round `r`; `None` when the round counts differ or a divisor
/// is zero.
pub fn per_round_ratio(a: &[f64], b: &[f64]) -> Option<Vec<f64>> {
    if a.len() != b.len() || b.contains(&0.0) {
        return None;
    }
    Some(a.iter().zip(b).map(|(x, y)| x / y).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(each: &[&[f64]]) -> Rounds {
        Rounds::new(
            each.iter()
                .map(|s| Stats::new(s.to_vec()).unwrap())
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn samples_split_into_the_plans_rounds_after_its_warm_up() {
        let plan = Plan {
            warmup: 1,
            samples: 2,
            rounds: 2,
        };
        let stats = |round: &[f64]| Stats::new(round.to_vec());
        let r = Rounds::from_samples(&[100.0, 1.0, 3.0, 5.0, 7.0], plan, stats).unwrap();
        assert_eq!(r.figures(), [2.0, 6.0]);
        assert!(Rounds::from_samples(&[100.0, 1.0, 3.0, 5.0], plan, stats).is_err());
        assert!(Rounds::from_samples(&[100.0, 1.0, 3.0, 5.0, 7.0, 9.0], plan, stats).is_err());
    }

    #[test]
    fn the_figure_is_the_median_of_the_rounds_medians() {
        let r = rounds(&[&[1.0, 2.0, 9.0], &[4.0, 5.0, 6.0], &[3.0]]);
        assert_eq!(r.figures(), vec![2.0, 5.0, 3.0]);
        assert_eq!(r.median(), 3.0);
        assert_eq!(r.count(), 3);
    }

    #[test]
    fn no_rounds_is_an_error() {
        assert!(Rounds::new(Vec::new()).is_err());
    }

    #[test]
    fn map_each_round_converts_each_round_by_its_own_factor() {
        let r = rounds(&[&[2.0], &[4.0]]).map_each_round(|round, t| (round + 1) as f64 * 8.0 / t);
        assert_eq!(r.figures(), vec![4.0, 4.0]);
        assert_eq!(r.each()[1].samples, vec![4.0]);
    }

    #[test]
    fn spread_and_ratio_per_round() {
        let s = Spread::of(&[1.02, 0.99, 1.00, 1.05]).unwrap();
        assert_eq!((s.min, s.max), (0.99, 1.05));
        assert!((s.median - 1.01).abs() < 1e-12);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::INFINITY]), None);
        assert_eq!(
            per_round_ratio(&[2.0, 3.0], &[1.0, 2.0]),
            Some(vec![2.0, 1.5])
        );
        assert_eq!(per_round_ratio(&[2.0], &[0.0]), None);
        assert_eq!(per_round_ratio(&[2.0], &[1.0, 1.0]), None);
    }

    #[test]
    fn spread_text_is_median_min_max() {
        assert_eq!(spread_text(&[3.0, 1.04, 2.0], 1), "2.0 (1.0, 3.0)");
        assert_eq!(spread_text(&[480.4, 13.6], 0), "247 (14, 480)");
        assert_eq!(spread_text(&[], 1), "n/a");
    }
}
