//! [`Event`]: an owned CUDA event, the one tool for ordering work across streams
//! without blocking the host.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use cudarc::driver::{result, sys};

use crate::device::DeviceInner;
use crate::error::{DriverResultExt, Error, Result};

/// An owned CUDA event without timing (the cheapest kind).
///
/// Created in the context current on the calling thread; every use below happens while
/// a scope of that context is open on this thread. A [`cached`](Event::cached) event
/// goes back to this thread's spare list when dropped, instead of being destroyed.
pub(crate) struct Event {
    raw: sys::CUevent,
    /// The device whose context the event belongs to, for cached events.
    owner: Option<Owner>,
}

/// Which device a cached event belongs to: its id (to match), and a weak handle that
/// tells whether its context is still alive when the event is finally destroyed.
struct Owner {
    id: u64,
    device: Weak<DeviceInner>,
}

/// Spare events of this thread, each with its device, at most [`SPARE_EVENTS`].
struct Spares(Vec<(Owner, sys::CUevent)>);

/// Enough for the events a thread has in flight in a deep pipeline; beyond that, an
/// event is destroyed on drop.
const SPARE_EVENTS: usize = 64;

thread_local! {
    /// Creating and destroying an event costs about a microsecond of driver time; a
    /// fork needs two and every download one. Reusing them is what makes a fork cost
    /// what the raw event calls cost. Per thread, so no lock.
    static SPARES: RefCell<Spares> = const { RefCell::new(Spares(Vec::new())) };
}

impl Drop for Spares {
    fn drop(&mut self) {
        for (owner, raw) in self.0.drain(..) {
            // A spare whose device is gone belonged to a context that may be destroyed
            // already: leak it rather than pass the driver a dead handle.
            if let Some(_alive) = owner.device.upgrade() {
                // SAFETY: the event was created by `Event::cached` and is destroyed once,
                // here; its device, hence its context, is kept alive by `_alive`.
                let _ = unsafe { result::event::destroy(raw) };
            }
        }
    }
}

impl Event {
    pub(crate) fn new() -> Result<Self> {
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .call("cuEventCreate")?;
        Ok(Event { raw, owner: None })
    }

    /// An event of `device`'s context (which must be current), reused from this
    /// thread's spares when one is available.
    pub(crate) fn cached(device: &Arc<DeviceInner>) -> Result<Self> {
        let reused = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                let index = spares
                    .0
                    .iter()
                    .rposition(|(owner, _)| owner.id == device.id)?;
                Some(spares.0.swap_remove(index))
            })
            .ok()
            .flatten();
        let (owner, raw) = match reused {
            Some(spare) => spare,
            None => {
                let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                    .call("cuEventCreate")?;
                let owner = Owner {
                    id: device.id,
                    device: Arc::downgrade(device),
                };
                (owner, raw)
            }
        };
        Ok(Event {
            raw,
            owner: Some(owner),
        })
    }

    /// Captures the work enqueued on `stream` so far.
    pub(crate) fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the event is alive (owned by `self`); the caller passes a live stream
        // of the current context, the one the event was created in.
        unsafe { result::event::record(self.raw, stream) }.call("cuEventRecord")
    }

    /// Makes `stream` wait, on the GPU, for the work captured by the last `record`.
    /// The host does not block.
    pub(crate) fn make_wait(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the event is alive; `stream` is a live stream of the event's context.
        // The wait captures the event's state now, so re-recording it later is harmless.
        unsafe {
            result::stream::wait_event(
                stream,
                self.raw,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .call("cuStreamWaitEvent")
    }

    /// Makes `waiter` wait on the GPU for everything enqueued on `source` so far
    /// (both streams of `device`, whose context is current).
    pub(crate) fn order(
        device: &Arc<DeviceInner>,
        source: sys::CUstream,
        waiter: sys::CUstream,
    ) -> Result<()> {
        let event = Event::cached(device)?;
        event.record(source)?;
        event.make_wait(waiter)
    }

    /// Blocks the host until the recorded work is complete.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: the event is alive (owned by `self`).
        unsafe { result::event::synchronize(self.raw) }.call("cuEventSynchronize")
    }

    /// `Ok(true)` once the recorded work is complete, without blocking.
    pub(crate) fn is_complete(&self) -> Result<bool> {
        // SAFETY: the event is alive (owned by `self`).
        match unsafe { result::event::query(self.raw) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::driver("cuEventQuery", e)),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            // Re-recording a spare later is fine even if this use has not completed:
            // a stream that waits on it captured the state of its last record.
            let mut spare = Some((owner, self.raw));
            let _ = SPARES.try_with(|spares| {
                let mut spares = spares.borrow_mut();
                if spares.0.len() < SPARE_EVENTS {
                    spares.0.extend(spare.take());
                }
            });
            if spare.is_none() {
                return;
            }
        }
        // SAFETY: created in `Event::new`/`Event::cached`, destroyed once (a cached
        // event that went back to the spares is not destroyed here). The driver allows
        // destroying an event that has not completed, and a stream already waiting on it
        // keeps waiting; its resources are released at completion.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}
