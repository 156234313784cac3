//! [`interleaved`]: the one loop that takes every measurement, implementations
//! round-robin within a round, rounds one after the other.

use super::plan::Plan;
use super::rounds::Rounds;
use super::stats::Stats;
use crate::error::{Context, Error, Result};

/// One implementation of a measurement: a label and a closure that takes one sample.
pub type Sampler<'a> = (&'static str, Box<dyn FnMut() -> Result<f64> + 'a>);

/// Takes `plan.warmup` unrecorded samples of each sampler, then `plan.rounds` rounds of
/// `plan.samples` recorded samples of each, interleaved round-robin within a round (a
/// round ends before the next begins); returns one [`Rounds`] per sampler, in order.
pub fn interleaved(plan: Plan, samplers: &mut [Sampler<'_>]) -> Result<Vec<Rounds>> {
    if plan.samples == 0 || plan.rounds == 0 {
        return Err(Error::msg(format!(
            "a measurement needs at least one round of one sample (asked for {} rounds of {})",
            plan.rounds, plan.samples
        )));
    }
    for _ in 0..plan.warmup {
        for (label, sample) in samplers.iter_mut() {
            sample().context(label)?;
        }
    }
    // rounds[sampler][round]: that round's samples of that sampler.
    let mut rounds: Vec<Vec<Stats>> = samplers
        .iter()
        .map(|_| Vec::with_capacity(plan.rounds))
        .collect();
    for round in 1..=plan.rounds {
        let mut samples: Vec<Vec<f64>> = samplers
            .iter()
            .map(|_| Vec::with_capacity(plan.samples))
            .collect();
        for _ in 0..plan.samples {
            for ((label, sample), out) in samplers.iter_mut().zip(samples.iter_mut()) {
                out.push(sample().context(label)?);
            }
        }
        for ((label, _), (s, out)) in samplers.iter().zip(samples.into_iter().zip(&mut rounds)) {
            out.push(Stats::new(s).context(&format!("{label}, round {round}"))?);
        }
    }
    samplers
        .iter()
        .zip(rounds)
        .map(|((label, _), r)| Rounds::new(r).context(label))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(warmup: usize, samples: usize, rounds: usize) -> Plan {
        Plan {
            warmup,
            samples,
            rounds,
        }
    }

    /// Two samplers that note their calls in `order`: "a" returns 1, 2, 3, ... (counted
    /// in `n`), "b" always 7.
    fn counting_samplers<'a>(
        order: &'a std::cell::RefCell<Vec<char>>,
        n: &'a mut f64,
    ) -> Vec<Sampler<'a>> {
        vec![
            (
                "a",
                Box::new(move || {
                    order.borrow_mut().push('a');
                    *n += 1.0;
                    Ok(*n)
                }),
            ),
            (
                "b",
                Box::new(move || {
                    order.borrow_mut().push('b');
                    Ok(7.0)
                }),
            ),
        ]
    }

    #[test]
    fn interleaved_runs_round_robin_and_drops_warmup() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut n = 0.0;
        let mut samplers = counting_samplers(&order, &mut n);
        let rounds = interleaved(plan(1, 3, 1), &mut samplers).unwrap();
        drop(samplers);
        assert_eq!(
            order.into_inner(),
            vec!['a', 'b', 'a', 'b', 'a', 'b', 'a', 'b']
        );
        assert_eq!(rounds[0].each()[0].samples, vec![2.0, 3.0, 4.0]);
        assert_eq!(rounds[1].median(), 7.0);
    }

    #[test]
    fn rounds_follow_each_other_and_each_has_its_own_samples() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut n = 0.0;
        let mut samplers = counting_samplers(&order, &mut n);
        let rounds = interleaved(plan(1, 2, 3), &mut samplers).unwrap();
        drop(samplers);
        // One warm-up pair, then three rounds of two pairs: always a, b alternating.
        assert_eq!(order.into_inner().len(), 2 * (1 + 2 * 3));
        let a: Vec<Vec<f64>> = rounds[0].each().iter().map(|s| s.samples.clone()).collect();
        assert_eq!(a, vec![vec![2.0, 3.0], vec![4.0, 5.0], vec![6.0, 7.0]]);
        assert_eq!(rounds[0].figures(), vec![2.5, 4.5, 6.5]);
        assert_eq!(rounds[1].figures(), vec![7.0, 7.0, 7.0]);
    }

    #[test]
    fn a_plan_without_rounds_or_samples_is_an_error() {
        let mut samplers: Vec<Sampler<'_>> = vec![("a", Box::new(|| Ok(1.0)))];
        assert!(interleaved(plan(0, 0, 3), &mut samplers).is_err());
        assert!(interleaved(plan(0, 3, 0), &mut samplers).is_err());
    }

    #[test]
    fn a_failing_sampler_names_itself() {
        let mut samplers: Vec<Sampler<'_>> = vec![("ours", Box::new(|| Err(Error::msg("boom"))))];
        let e = interleaved(plan(0, 1, 1), &mut samplers).unwrap_err();
        assert_eq!(e.to_string(), "ours: boom");
    }
}
