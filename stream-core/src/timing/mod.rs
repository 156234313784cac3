//! GPU time between two points of scopes' streams: [`GpuTimer`], a pair of timing
//! events recorded in scopes and read once the work between them has completed.
//!
//! Owns: [`GpuTimer`]. Uses: `driver/` (timing events), `device/`, `scope/`, `error`;
//! nothing below uses it.

mod gpu_timer;

pub use gpu_timer::GpuTimer;
