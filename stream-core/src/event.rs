//! [`Event`]: an owned CUDA event, the one tool for ordering work across streams
//! without blocking the host.

use cudarc::driver::{result, sys};

use crate::error::{DriverResultExt, Error, Result};

/// An owned CUDA event without timing (the cheapest kind), destroyed on drop.
///
/// Created in the context current on the calling thread; every use below happens while
/// a scope of that context is open on this thread.
pub(crate) struct Event(sys::CUevent);

impl Event {
    pub(crate) fn new() -> Result<Self> {
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .call("cuEventCreate")?;
        Ok(Event(raw))
    }

    /// Captures the work enqueued on `stream` so far.
    pub(crate) fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the event is alive (owned by `self`); the caller passes a live stream
        // of the current context, the one the event was created in.
        unsafe { result::event::record(self.0, stream) }.call("cuEventRecord")
    }

    /// Makes `stream` wait, on the GPU, for the work captured by the last `record`.
    /// The host does not block.
    pub(crate) fn make_wait(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the event is alive; `stream` is a live stream of the event's context.
        // The wait captures the event's state now, so re-recording it later is harmless.
        unsafe {
            result::stream::wait_event(
                stream,
                self.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .call("cuStreamWaitEvent")
    }

    /// Makes `waiter` wait on the GPU for everything enqueued on `source` so far.
    pub(crate) fn order(source: sys::CUstream, waiter: sys::CUstream) -> Result<()> {
        let event = Event::new()?;
        event.record(source)?;
        event.make_wait(waiter)
    }

    /// Blocks the host until the recorded work is complete.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: the event is alive (owned by `self`).
        unsafe { result::event::synchronize(self.0) }.call("cuEventSynchronize")
    }

    /// `Ok(true)` once the recorded work is complete, without blocking.
    pub(crate) fn is_complete(&self) -> Result<bool> {
        // SAFETY: the event is alive (owned by `self`).
        match unsafe { result::event::query(self.0) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::driver("cuEventQuery", e)),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `Event::new`, destroyed once. The driver allows destroying
        // an event that has not completed, and a stream already waiting on it keeps
        // waiting; its resources are released at completion.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}
