//! [`Config`] (`--quick`, `--repeat`, `--kernel-ratio`) and the [`Plan`] of one
//! measurement: warm-up, samples per round, rounds.

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
