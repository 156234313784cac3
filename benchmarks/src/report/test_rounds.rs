//! Test data of the report's tests: rounds of one sample each.

use crate::sampling::{Rounds, Stats};

/// Rounds of one sample each, with these figures.
pub fn rounds(figures: &[f64]) -> Option<Rounds> {
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
