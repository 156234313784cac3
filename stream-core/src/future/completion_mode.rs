//! [`CompletionMode`]: how a device's completion thread waits while futures' work is in
//! flight: asleep in the driver (the default), or polling the events.

use std::sync::atomic::{AtomicU8, Ordering};

use super::watcher::Watcher;
use crate::device::Device;
use crate::error::Result;

/// How the completion thread of a device waits for the work of the futures in flight
/// (see [`set_completion_mode`]). With nothing in flight it sleeps in either mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CompletionMode {
    /// Sleeps in `cuEventSynchronize` on the oldest operation when none has completed
    /// (the events are blocking-sync), and is woken by the driver: no CPU is spent while
    /// the GPU works, and each wake-up costs the driver's interrupt and the thread's
    /// scheduling (tens of microseconds).
    #[default]
    Sleep,
    /// Asks the driver about every stream's oldest operation (`cuEventQuery`) in a loop,
    /// yielding the core between rounds, for as long as any operation is in flight:
    /// an operation is finished as soon as it has ended, at the price of one core kept
    /// busy while work is in flight. For servers whose requests are short and copy-bound,
    /// where the sleeping wake-up is a visible part of each request. Operations made in
    /// this mode record plain events instead of blocking-sync ones, which the GPU
    /// processes faster (measured on an H200: sixteen streams of 1 MiB requests move
    /// 0.84x the requests per second with blocking-sync events after each than with
    /// plain ones).
    Poll,
}

impl CompletionMode {
    pub(super) fn to_bits(self) -> u8 {
        match self {
            CompletionMode::Sleep => 0,
            CompletionMode::Poll => 1,
        }
    }

    pub(super) fn from_bits(bits: u8) -> CompletionMode {
        match bits {
            1 => CompletionMode::Poll,
            _ => CompletionMode::Sleep,
        }
    }
}

/// The mode as the completion thread reads it at each turn of its loop.
#[derive(Debug, Default)]
pub(super) struct ModeCell(AtomicU8);

impl ModeCell {
    pub(super) fn get(&self) -> CompletionMode {
        CompletionMode::from_bits(self.0.load(Ordering::Relaxed))
    }

    pub(super) fn set(&self, mode: CompletionMode) {
        self.0.store(mode.to_bits(), Ordering::Relaxed);
    }
}

/// Sets how `device`'s completion thread waits for the futures' work in flight
/// ([`CompletionMode`]), from its next turn on; it starts the thread if no future of the
/// device has yet. The setting holds for the device (all its streams) for the life of
/// the process, until set again. Either mode finishes every operation, in the same
/// order per stream, with the same outcomes; only the waiting differs.
///
/// ```no_run
/// use stream_core::future::{set_completion_mode, CompletionMode};
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// set_completion_mode(&dev, CompletionMode::Poll)?; // a copy-bound server
/// # Ok(()) }
/// ```
///
/// Returns an error only when the completion thread could not be started.
pub fn set_completion_mode(device: &Device, mode: CompletionMode) -> Result<()> {
    let watcher = Watcher::of(device)?;
    watcher.set_mode(mode);
    Ok(())
}

/// The [`CompletionMode`] of `device`'s completion thread ([`CompletionMode::Sleep`]
/// before any was set, or before the device's first future).
pub fn completion_mode(device: &Device) -> CompletionMode {
    Watcher::existing(device).map_or(CompletionMode::Sleep, |watcher| watcher.mode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_survives_its_bits_and_the_default_sleeps() {
        for mode in [CompletionMode::Sleep, CompletionMode::Poll] {
            assert_eq!(CompletionMode::from_bits(mode.to_bits()), mode);
        }
        let cell = ModeCell::default();
        assert_eq!(cell.get(), CompletionMode::Sleep);
        cell.set(CompletionMode::Poll);
        assert_eq!(cell.get(), CompletionMode::Poll);
        assert_eq!(CompletionMode::default(), CompletionMode::Sleep);
    }
}
