//! [`GpuTimer`]: GPU time between two timing events, for the raw and cudarc sides
//! (ours time with `stream_core::GpuTimer`).

use cudarc::driver::{result, sys};

use crate::error::{Context, Error, Result};

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
