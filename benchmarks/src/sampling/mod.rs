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

mod gpu_timer;
mod interleave;
mod plan;
mod rounds;
mod stats;

pub use gpu_timer::GpuTimer;
pub use interleave::{interleaved, Sampler};
pub use plan::{Config, Plan};
pub use rounds::{per_round_ratio, spread_text, Rounds, Spread};
pub use stats::{median, Stats};
