//! [`RawEvent`]: an owned CUDA event, without timing (spinning or blocking when waited
//! for) or with it (for GPU timers).

use std::sync::{Arc, Weak};

use cudarc::driver::{result, sys};

use super::context::PrimaryContext;
use super::stream::{BorrowedStream, RawStream};
use crate::error::{DriverResultExt, Error, Result};

/// An event without timing (the cheapest kind), unless made by
/// [`new_timing`](Self::new_timing). A thread that waits for one made by
/// [`new`](Self::new) waits as the context's scheduling policy says (the primary
/// context's default, `CU_CTX_SCHED_AUTO`, spins while the process has fewer active
/// contexts than the machine has cores); one made by [`new_blocking`](Self::new_blocking)
/// is always waited for asleep.
///
/// It does not keep its context alive (per-thread caches of spare events must not keep
/// a device's context retained after the device is dropped). Every use therefore takes
/// a proof that the context is alive: a stream of the same context (which keeps it
/// alive), or the context itself; an event of another context is refused with an error.
/// The check is a pointer comparison: a `Weak` keeps the context's allocation, so no
/// other context can ever have the same address while the event exists.
///
/// Dropped, it is destroyed (with its context bound) if its context is still alive; the
/// events of a released context went with it. The driver allows destroying an event
/// whose recorded work is pending: a stream already waiting on it keeps waiting.
pub(crate) struct RawEvent {
    raw: sys::CUevent,
    context: Weak<PrimaryContext>,
}

// SAFETY: a `CUevent` is an opaque handle the thread-safe driver accepts from any
// thread; it is destroyed once, by `Drop`.
unsafe impl Send for RawEvent {}
// SAFETY: see `Send`; shared access only passes the handle to driver calls.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// A new event of `context`.
    pub(crate) fn new(context: &Arc<PrimaryContext>) -> Result<Self> {
        Self::with_flags(context, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
    }

    /// A new event of `context` that puts a thread waiting for it to sleep
    /// (`CU_EVENT_BLOCKING_SYNC`): [`synchronize`](Self::synchronize) blocks the calling
    /// thread until the driver wakes it, instead of spinning. For a thread whose job is
    /// to wait, such as the futures' completion thread, which must not busy-poll.
    pub(crate) fn new_blocking(context: &Arc<PrimaryContext>) -> Result<Self> {
        Self::with_flags(
            context,
            sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
                | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        )
    }

    /// A new event of `context` that records a timestamp (`CU_EVENT_DEFAULT`), for
    /// [`elapsed_ms_since`](Self::elapsed_ms_since).
    pub(crate) fn new_timing(context: &Arc<PrimaryContext>) -> Result<Self> {
        Self::with_flags(context, sys::CUevent_flags::CU_EVENT_DEFAULT as u32)
    }

    /// A new event of `context` with `flags` (documented `CUevent_flags` bits).
    fn with_flags(context: &Arc<PrimaryContext>, flags: u32) -> Result<Self> {
        let _bound = context.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a live local the driver writes the new event's handle to;
        // `flags` combines documented `CUevent_flags` bits (every caller); the event is
        // created in `context`, bound above and alive (borrowed).
        unsafe { sys::cuEventCreate(&raw mut raw, flags) }
            .result()
            .call("cuEventCreate")?;
        Ok(RawEvent {
            raw,
            context: Arc::downgrade(context),
        })
    }

    /// `true` while the event's context is alive (a spare of a released context is
    /// never used again).
    pub(crate) fn context_is_alive(&self) -> bool {
        self.context.strong_count() > 0
    }

    /// `true` when the event belongs to `context` (which is then alive for as long as
    /// the caller's borrow of it).
    #[inline]
    pub(crate) fn belongs_to(&self, context: &Arc<PrimaryContext>) -> bool {
        std::ptr::eq(self.context.as_ptr(), Arc::as_ptr(context))
    }

    /// `Ok` when the event belongs to `context`, else an error naming `call`.
    #[inline]
    fn check(&self, context: &Arc<PrimaryContext>, call: &'static str) -> Result<()> {
        if self.belongs_to(context) {
            Ok(())
        } else {
            Err(Error::driver(
                call,
                result::DriverError(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT),
            ))
        }
    }

    /// The driver's handle, for a call whose stream or context keeps the event's context
    /// alive (checked with [`belongs_to`](Self::belongs_to)).
    #[inline(always)]
    pub(super) fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// Captures the work enqueued on `stream` so far.
    #[inline]
    pub(crate) fn record(&self, stream: &RawStream) -> Result<()> {
        self.check(stream.context(), "cuEventRecord")?;
        // SAFETY: both handles are live: `stream` is borrowed and keeps its context, the
        // event's (checked above), alive.
        unsafe { result::event::record(self.raw, stream.raw()) }.call("cuEventRecord")
    }

    /// Captures the work enqueued on `stream`, a stream known only by its handle (another
    /// thread's: the watchdog's progress marker), so far.
    pub(crate) fn record_on_borrowed(&self, stream: &BorrowedStream<'_>) -> Result<()> {
        self.check(stream.context(), "cuEventRecord")?;
        // SAFETY: both handles are live: `stream` by `BorrowedStream::new`'s contract for
        // as long as it is borrowed, and the event with its context, which `stream`
        // borrows (checked above).
        unsafe { result::event::record(self.raw, stream.raw()) }.call("cuEventRecord")
    }

    /// The common case of recording this event on `source` and making `waiter` wait for
    /// it: both calls made directly, `true` when both succeeded, with no error value
    /// built or moved. `false` proves nothing (the event or a stream of another context,
    /// or a call failed): do both again through [`record`](Self::record) and
    /// [`RawStream::wait`], which say why. Doing them again is harmless: a record
    /// captures all work enqueued so far, and a second wait only repeats the first.
    #[inline]
    pub(crate) fn reordered_at_once(&self, source: &RawStream, waiter: &RawStream) -> bool {
        if !(self.belongs_to(source.context()) && self.belongs_to(waiter.context())) {
            return false;
        }
        // SAFETY: the event and both streams are live: the streams are borrowed and keep
        // their context, the event's (checked above), alive.
        if unsafe { result::event::record(self.raw, source.raw()) }.is_err() {
            return false;
        }
        let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
        // SAFETY: as above.
        unsafe { result::stream::wait_event(waiter.raw(), self.raw, flags) }.is_ok()
    }

    /// Blocks the host until the recorded work is complete, with `context` (the event's)
    /// bound.
    /// As for streams, directly when `context` is believed current, and if that fails
    /// with an error that is not sticky (or it is not believed current), once more with
    /// it bound for real.
    pub(crate) fn synchronize(&self, context: &Arc<PrimaryContext>) -> Result<()> {
        self.check(context, "cuEventSynchronize")?;
        context.run_as_current(|| self.synchronize_as_bound())
    }

    /// One `cuEventSynchronize` under whatever context is current; the event's context is
    /// alive (the caller checked it against a borrowed one).
    fn synchronize_as_bound(&self) -> Result<()> {
        // SAFETY: the event is alive: its context is (the caller checked, borrowed).
        unsafe { result::event::synchronize(self.raw) }.call("cuEventSynchronize")
    }

    /// The GPU time in milliseconds from `start`'s last record to this event's, both
    /// timing events of `context` (`cuEventElapsedTime`, resolution about half a
    /// microsecond); `Ok(None)` while either record has not completed. An event never
    /// recorded is the driver's error (`CUDA_ERROR_INVALID_HANDLE`).
    pub(crate) fn elapsed_ms_since(
        &self,
        start: &RawEvent,
        context: &Arc<PrimaryContext>,
    ) -> Result<Option<f32>> {
        self.check(context, "cuEventElapsedTime")?;
        start.check(context, "cuEventElapsedTime")?;
        let _bound = context.bind()?;
        // SAFETY: both events are alive (their context is: checked above, borrowed); the
        // call only reads their timestamps.
        match unsafe { result::event::elapsed(start.raw, self.raw) } {
            Ok(ms) => Ok(Some(ms)),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(None),
            Err(e) => Err(Error::driver("cuEventElapsedTime", e)),
        }
    }

    /// `Ok(true)` once the recorded work is complete, without blocking.
    pub(crate) fn is_complete(&self, context: &Arc<PrimaryContext>) -> Result<bool> {
        self.check(context, "cuEventQuery")?;
        // SAFETY: the event is alive (its context is, checked above); a query only reads
        // its state.
        match unsafe { result::event::query(self.raw) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::driver("cuEventQuery", e)),
        }
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        let Some(context) = self.context.upgrade() else {
            return; // the context, and its events with it, are gone
        };
        let _bound = context.bind();
        // SAFETY: created by `cuEventCreate` in `new`, destroyed once, here, with its
        // context alive (`context`) and bound (see the type's docs for recorded work
        // still pending). A failure only leaks it.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}

// The stream side of an event, here so that `stream` need not know events.
impl RawStream {
    /// Makes this stream wait, on the GPU, for the work `event` captured at its last
    /// record. The host does not block; re-recording the event later does not change
    /// what this wait waits for.
    #[inline]
    pub(crate) fn wait(&self, event: &RawEvent) -> Result<()> {
        event.check(self.context(), "cuStreamWaitEvent")?;
        // SAFETY: both handles are live: the stream is owned by `self`, and the event's
        // context is this stream's (checked above), which `self` keeps alive.
        unsafe {
            result::stream::wait_event(
                self.raw(),
                event.raw(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .call("cuStreamWaitEvent")
    }

    /// Makes this stream wait, on the GPU, for the work `event` captured at its last
    /// record on `source`, which may be a stream of another context (another device):
    /// `cuStreamWaitEvent` takes "an event from a different context or device than the
    /// stream" (CUDA driver API). The driver refuses the wait unless this stream's
    /// context is current (`CUDA_ERROR_INVALID_CONTEXT`, measured on 2 H200s), so it is
    /// made with it current.
    pub(crate) fn wait_recorded_on(&self, event: &RawEvent, source: &RawStream) -> Result<()> {
        event.check(source.context(), "cuStreamWaitEvent")?;
        self.context().run_as_current(|| {
            // SAFETY: both handles are live: this stream is owned by `self`, and the
            // event belongs to `source`'s context (checked above), which the borrowed
            // `source` keeps alive.
            unsafe {
                result::stream::wait_event(
                    self.raw(),
                    event.raw(),
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .call("cuStreamWaitEvent")
        })
    }
}
