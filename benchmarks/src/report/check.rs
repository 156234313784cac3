//! Pass/fail criteria on a value that has one figure per round: the median over the
//! rounds must meet one target and the worst round another (often the same), so that a
//! lucky median cannot hide a bad round.

use super::format::fmt_ratio;
use crate::sampling::{median, Spread};

/// Which direction of a figure is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Times and costs.
    Lower,
    /// Bandwidths, throughputs, efficiencies.
    Higher,
}

impl Better {
    /// `<=` or `>=`: how a passing value compares with its target.
    pub fn op(self) -> &'static str {
        match self {
            Better::Lower => "<=",
            Better::Higher => ">=",
        }
    }
}

/// Where a target comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Stated in the issues: issue 6's targets as issue 13 restates and extends them.
    Issue,
    /// The design's promise ("correct use costs what the raw calls cost") with the
    /// tolerance of the nearest issue target; proposed by the benchmark, not the issue.
    Goal,
}

/// A pass/fail criterion on one row: `what`, one value per round, compared with
/// `median_target` (the median over the rounds) and with `worst_target` (the worst
/// round: the one furthest on the wrong side, the largest for `Lower`, the smallest
/// for `Higher`).
#[derive(Debug, Clone)]
pub struct Check {
    /// What is compared, e.g. `ours/raw` or `ours/bound(UD)`.
    pub what: &'static str,
    /// The value of `what` in each round, in order.
    pub per_round: Vec<f64>,
    /// The threshold of the median over the rounds.
    pub median_target: f64,
    /// The threshold of the worst round.
    pub worst_target: f64,
    /// `Lower`: pass when `value <= target`; `Higher`: when `value >= target`.
    pub better: Better,
    /// Where the targets come from.
    pub source: Source,
}

/// Which parts of a [`Check`] were met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The median over the rounds met its target.
    pub median_met: bool,
    /// The worst round met its target.
    pub worst_met: bool,
}

impl Outcome {
    /// Both parts were met.
    pub fn passed(self) -> bool {
        self.median_met && self.worst_met
    }

    /// The parts that missed, e.g. `median, worst`; empty when both were met.
    pub fn missed(self) -> String {
        let parts: Vec<&str> = [(!self.median_met, "median"), (!self.worst_met, "worst")]
            .into_iter()
            .filter_map(|(missed, part)| missed.then_some(part))
            .collect();
        parts.join(", ")
    }
}

impl Check {
    /// `what` must meet `target` in the median and in the worst round alike.
    pub fn same_target(
        what: &'static str,
        per_round: Vec<f64>,
        target: f64,
        better: Better,
        source: Source,
    ) -> Check {
        Check {
            what,
            per_round,
            median_target: target,
            worst_target: target,
            better,
            source,
        }
    }

    /// The median of the per-round values.
    pub fn median(&self) -> f64 {
        median(&self.per_round)
    }

    /// The worst round's value: the largest for `Lower`, the smallest for `Higher`;
    /// NaN when a value is not finite.
    pub fn worst(&self) -> f64 {
        match (Spread::of(&self.per_round), self.better) {
            (Some(s), Better::Lower) => s.max,
            (Some(s), Better::Higher) => s.min,
            (None, _) => f64::NAN,
        }
    }

    /// Which parts were met (a NaN meets nothing).
    pub fn outcome(&self) -> Outcome {
        let meets = |value: f64, target: f64| match self.better {
            Better::Lower => value <= target,
            Better::Higher => value >= target,
        };
        Outcome {
            median_met: meets(self.median(), self.median_target),
            worst_met: meets(self.worst(), self.worst_target),
        }
    }

    /// `true` when the median and the worst round both met their targets.
    pub fn passed(&self) -> bool {
        self.outcome().passed()
    }

    /// The targets, e.g. `ours/raw <= 1.030` or `ours/pinned >= 0.800, worst >= 0.600`,
    /// with ` (goal)` for a target the benchmark proposes.
    pub fn target_text(&self) -> String {
        let op = self.better.op();
        let mut text = format!("{} {op} {}", self.what, fmt_ratio(self.median_target));
        if self.worst_target != self.median_target {
            text.push_str(&format!(", worst {op} {}", fmt_ratio(self.worst_target)));
        }
        if self.source == Source::Goal {
            text.push_str(" (goal)");
        }
        text
    }

    /// The measured values: `median 0.950, worst 0.901`.
    pub fn values_text(&self) -> String {
        format!(
            "median {}, worst {}",
            fmt_ratio(self.median()),
            fmt_ratio(self.worst())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_is_the_round_furthest_on_the_wrong_side() {
        let lower = Check::same_target(
            "ours/raw",
            vec![1.0, 1.05, 0.9],
            1.03,
            Better::Lower,
            Source::Issue,
        );
        assert_eq!(lower.worst(), 1.05);
        assert_eq!(
            lower.outcome(),
            Outcome {
                median_met: true,
                worst_met: false
            }
        );
        assert_eq!(lower.outcome().missed(), "worst");
        let higher = Check::same_target(
            "ours/raw",
            vec![1.0, 1.05, 0.9],
            0.98,
            Better::Higher,
            Source::Issue,
        );
        assert_eq!(higher.worst(), 0.9);
        assert!(!higher.passed());
    }

    #[test]
    fn median_and_worst_have_targets_of_their_own() {
        let c = Check {
            what: "ours/pinned",
            per_round: vec![0.85, 0.62, 0.81],
            median_target: 0.8,
            worst_target: 0.6,
            better: Better::Higher,
            source: Source::Issue,
        };
        assert!(c.passed());
        assert_eq!(c.target_text(), "ours/pinned >= 0.800, worst >= 0.600");
        assert_eq!(c.values_text(), "median 0.810, worst 0.620");
        let c = Check {
            per_round: vec![0.75, 0.55, 0.81],
            ..c
        };
        assert_eq!(c.outcome().missed(), "median, worst");
    }

    #[test]
    fn a_value_that_is_not_finite_meets_nothing() {
        let c = Check::same_target("x", vec![f64::NAN], 1.0, Better::Lower, Source::Goal);
        assert!(!c.outcome().median_met && !c.outcome().worst_met);
        assert_eq!(c.target_text(), "x <= 1.000 (goal)");
    }
}
