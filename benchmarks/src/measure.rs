//! Warm-up, rounds, repetition, medians, and the two clocks: GPU time from a pair of
//! CUDA events (where the GPU does the work) and host time from `Instant` (where the
//! cost of enqueuing is the point).
//!
//! Implementations of one measurement run interleaved, round-robin (a sample of each,
//! then the next sample of each, ...), so that clock and temperature drift during the
//! run affects them all alike. The measurement is taken `--repeat` times in rounds, one
//! after the other: round 1 of every implementation, then round 2, ...; each round's
//! median is that round's figure (see [`Rounds`]), so the spread of the figures over
//! the rounds shows how much of a difference is noise.

use cudarc::driver::{result, sys};

use crate::error::{Context, Error, Result};
use crate::rounds::Rounds;

/// Repetition counts and problem sizes: full run or `--quick` smoke run.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--quick`: small sizes and few repetitions.
    pub quick: bool,
    /// `--kernel-ratio`: the pipeline's kernel time as a fraction of its slower copy
    /// direction (1.0: all three stages equally long).
    pub kernel_ratio: f64,
    /// `--repeat`: rounds of every measurement (at least 1).
    pub repeat: usize,
}

impl Config {
    /// `full` in a full run, `quick` with `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// `warmup` samples, then `--repeat` rounds of `samples` samples each.
    pub fn plan(&self, warmup: usize, samples: usize) -> Plan {
        Plan {
            warmup,
            samples,
            rounds: self.repeat,
        }
    }
}

/// How one measurement is taken: unrecorded warm-up samples of each implementation,
/// then `rounds` rounds of `samples` recorded samples of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Unrecorded samples of each implementation, before the first round.
    pub warmup: usize,
    /// Recorded samples of each implementation per round.
    pub samples: usize,
    /// Rounds.
    pub rounds: usize,
}

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
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        Ok(Stats {
            median,
            min: sorted[0],
            max: sorted[n - 1],
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

/// A pair of timing events: GPU time between two points of one stream, or from a
/// point of one stream to a point of another that waits for it.
pub struct GpuTimer {
    start: sys::CUevent,
    stop: sys::CUevent,
}

impl GpuTimer {
    /// Two timing events in the context current on this thread.
    pub fn new() -> Result<Self> {
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = result::event::create(flags).context("cuEventCreate (timer)")?;
        let stop = match result::event::create(flags) {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: `start` was created just above and is destroyed once, here.
                let _ = unsafe { result::event::destroy(start) };
                return Err(Error::from(e)).context("cuEventCreate (timer)");
            }
        };
        Ok(GpuTimer { start, stop })
    }

    /// Marks the start on `stream`.
    pub fn start(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the event is alive (owned by `self`); callers pass a live stream of
        // the context the event was created in.
        unsafe { result::event::record(self.start, stream) }.context("cuEventRecord (timer start)")
    }

    /// Marks the stop on `stream`.
    pub fn stop(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: as in `start`.
        unsafe { result::event::record(self.stop, stream) }.context("cuEventRecord (timer stop)")
    }

    /// Waits for the stop event and returns the GPU seconds between start and stop.
    pub fn seconds(&self) -> Result<f64> {
        // SAFETY: the event is alive; it was recorded by `stop`.
        unsafe { result::event::synchronize(self.stop) }.context("cuEventSynchronize (timer)")?;
        // SAFETY: both events are alive and were recorded, the stop one has completed.
        let ms = unsafe { result::event::elapsed(self.start, self.stop) }
            .context("cuEventElapsedTime (timer)")?;
        Ok(f64::from(ms) * 1e-3)
    }
}

impl Drop for GpuTimer {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, here; the driver allows destroying an
        // event whose recorded work has not completed.
        let _ = unsafe { result::event::destroy(self.start) };
        // SAFETY: as above.
        let _ = unsafe { result::event::destroy(self.stop) };
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
