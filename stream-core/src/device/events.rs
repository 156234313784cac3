//! [`Event`]: the one tool for ordering work across streams without blocking the host,
//! reused from a per-thread cache of spare events.

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;

use crate::driver::context::PrimaryContext;
use crate::driver::event::RawEvent;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

/// An event of one context, taken from this thread's spares of that context when one is
/// available, and given back to them when dropped.
pub(crate) struct Event {
    /// `None` only after `drop` moved it back to the spares.
    raw: Option<RawEvent>,
}

/// Spare events of this thread, at most [`SPARE_EVENTS`]. Each knows its context, and
/// is only reused for that one while it is alive (see [`RawEvent::belongs_to`]).
struct Spares(Vec<RawEvent>);

/// Enough for the events a thread has in flight in a deep pipeline; beyond that, an
/// event is destroyed on drop.
const SPARE_EVENTS: usize = 64;

thread_local! {
    /// Creating and destroying an event costs about a microsecond of driver time; a
    /// fork needs two and every download one. Reusing them is what makes a fork cost
    /// what the raw event calls cost. Per thread, so no lock.
    static SPARES: RefCell<Spares> = const { RefCell::new(Spares(Vec::new())) };
}

impl Event {
    /// An event of `context`, reused from this thread's spares when one is available,
    /// else created (with the context bound).
    pub(crate) fn cached(context: &Arc<PrimaryContext>) -> Result<Self> {
        let reused = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                // A spare that belongs to `context` (a pointer comparison) is alive, since
                // `context` is; the last one matches in the common case.
                let index = spares.0.iter().rposition(|e| e.belongs_to(context))?;
                Some(spares.0.swap_remove(index))
            })
            .ok()
            .flatten();
        let raw = match reused {
            Some(raw) => raw,
            None => RawEvent::new(context)?,
        };
        Ok(Event { raw: Some(raw) })
    }

    /// `true` when this is an event of `context`.
    #[inline]
    pub(crate) fn belongs_to(&self, context: &Arc<PrimaryContext>) -> bool {
        self.raw.as_ref().is_some_and(|raw| raw.belongs_to(context))
    }

    /// The event. `raw` is `None` only inside `drop`, so the error is never seen.
    fn raw(&self) -> Result<&RawEvent> {
        self.raw.as_ref().ok_or_else(|| {
            Error::driver(
                "cuEventRecord",
                DriverError(sys::CUresult::CUDA_ERROR_INVALID_HANDLE),
            )
        })
    }

    /// Captures the work enqueued on `stream` so far.
    pub(crate) fn record(&self, stream: &RawStream) -> Result<()> {
        self.raw()?.record(stream)
    }

    /// Makes `waiter` wait on the GPU for everything enqueued on `source` so far
    /// (`source` a stream of `context`; `waiter` of any device's).
    pub(crate) fn order(
        context: &Arc<PrimaryContext>,
        source: &RawStream,
        waiter: &RawStream,
    ) -> Result<()> {
        Event::cached(context)?.reorder(source, waiter)
    }

    /// Makes `waiter` wait on the GPU for everything enqueued on `source` so far, through
    /// this event (recorded on `source` again: a wait made earlier keeps the state of the
    /// record before it).
    ///
    /// The common case is two driver calls and nothing else (see
    /// [`RawEvent::reordered_at_once`]); anything else does both again and says why.
    #[inline]
    pub(crate) fn reorder(&self, source: &RawStream, waiter: &RawStream) -> Result<()> {
        if self
            .raw
            .as_ref()
            .is_some_and(|raw| raw.reordered_at_once(source, waiter))
        {
            return Ok(());
        }
        self.reorder_in_full(source, waiter)
    }

    /// [`reorder`](Self::reorder) when the direct calls did not both succeed.
    #[cold]
    #[inline(never)]
    fn reorder_in_full(&self, source: &RawStream, waiter: &RawStream) -> Result<()> {
        self.record(source)?;
        // `waiter` may be a stream of another device (a fork or hand-off across devices).
        waiter.wait_recorded_on(self.raw()?, source)
    }

    /// Blocks the host until the recorded work is complete, with `context` (the
    /// event's) bound.
    pub(crate) fn synchronize(&self, context: &Arc<PrimaryContext>) -> Result<()> {
        self.raw()?.synchronize(context)
    }

    /// `Ok(true)` once the recorded work is complete, without blocking.
    pub(crate) fn is_complete(&self, context: &Arc<PrimaryContext>) -> Result<bool> {
        self.raw()?.is_complete(context)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // Re-recording a spare later is fine even if this use has not completed: a
        // stream that waits on it captured the state of its last record.
        let mut spare = self.raw.take();
        let _ = SPARES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.0.len() >= SPARE_EVENTS {
                // Spares of contexts that are gone make room (their events went with
                // their context); this scan runs only when the list is full.
                spares.0.retain(RawEvent::context_is_alive);
            }
            if spares.0.len() < SPARE_EVENTS {
                spares.0.extend(spare.take());
            }
        });
        // Not kept: `RawEvent`'s own drop destroys it.
        drop(spare);
    }
}
