//! [`Event`]: an owned CUDA event, the one tool for ordering work across streams
//! without blocking the host.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use cudarc::driver::{result, sys};

use crate::device::DeviceInner;
use crate::error::{DriverResultExt, Error, Result};

/// An owned CUDA event without timing (the cheapest kind).
///
/// Created in its device's context, which it binds for the creation; recorded only on
/// streams of that context. A [`cached`](Event::cached) event goes back to this
/// thread's spare list when dropped, instead of being destroyed.
pub(crate) struct Event {
    raw: sys::CUevent,
    /// The context the event belongs to, for cached events.
    owner: Option<Owner>,
}

/// Which context a cached event belongs to: its handle (to match), and a weak handle of
/// the device that retained it when the event was made, which tells whether that
/// context is certainly still alive when the spare is reused or finally destroyed.
struct Owner {
    context: sys::CUcontext,
    device: Weak<DeviceInner>,
}

/// Spare events of this thread, each with its context, at most [`SPARE_EVENTS`].
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

/// Creates an event without timing in `device`'s context, bound for the call.
fn create(device: &DeviceInner) -> Result<sys::CUevent> {
    let _bound = device.bind()?;
    result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).call("cuEventCreate")
}

impl Event {
    /// A new event of `device`'s context (bound for the creation).
    pub(crate) fn new(device: &DeviceInner) -> Result<Self> {
        Ok(Event {
            raw: create(device)?,
            owner: None,
        })
    }

    /// An event of `device`'s context, reused from this thread's spares of that context
    /// when one is available, else created with the context bound.
    pub(crate) fn cached(device: &Arc<DeviceInner>) -> Result<Self> {
        let context = device.ctx();
        let reused = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                // A spare whose device handle is gone may belong to a context that was
                // destroyed (and whose handle value was reused): never reuse it.
                spares
                    .0
                    .retain(|(owner, _)| owner.device.strong_count() > 0);
                let index = spares
                    .0
                    .iter()
                    .rposition(|(owner, _)| owner.context == context)?;
                Some(spares.0.swap_remove(index))
            })
            .ok()
            .flatten();
        let (owner, raw) = match reused {
            Some(spare) => spare,
            None => {
                let owner = Owner {
                    context,
                    device: Arc::downgrade(device),
                };
                (owner, create(device)?)
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
        // of the context the event was created in. (Which context is current does not
        // matter: the driver records on the stream named.)
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
    /// (both live streams of `device`'s context).
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
