//! [`RawStream`]: an owned non-blocking CUDA stream, or a foreign one (another
//! library's, kept alive by its owner and never destroyed here).

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::context::{Bound, PrimaryContext};
use crate::error::{DriverResultExt, Error, Result};

/// A non-blocking stream (it never synchronises implicitly with the legacy default
/// stream), destroyed when dropped, with its context bound (the stream keeps its
/// context alive).
///
/// Dropping it with work still queued is allowed: "in case the device is still doing
/// work in the stream when `cuStreamDestroy()` is called, the function will return
/// immediately and the resources associated with stream will be released automatically
/// once the device has completed all work in stream" (CUDA driver API).
///
/// A *foreign* stream ([`RawStream::foreign`]) is another library's (cudarc's, see
/// [`super::cudarc_bridge`]): the handle is kept alive by its owner, which this value holds,
/// and is never destroyed here. Other code may capture it into a graph at any time, so
/// scopes on it query the driver for capture ([`is_foreign`](Self::is_foreign)).
pub(crate) struct RawStream {
    raw: sys::CUstream,
    context: Arc<PrimaryContext>,
    /// `Some` for a foreign stream: the handle's owner, dropped (with the context
    /// bound) when this value is, instead of destroying the handle.
    foreign: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: a `CUstream` is an opaque handle; the driver API is thread-safe and accepts it
// from any thread (work issued from several threads is still run in one order). The
// handle is destroyed once, by the owner's `Drop`.
unsafe impl Send for RawStream {}
// SAFETY: see `Send`: shared access only passes the handle to thread-safe driver calls.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// A new non-blocking stream in `context`.
    pub(crate) fn new(context: &Arc<PrimaryContext>) -> Result<Self> {
        let _bound = context.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .call("cuStreamCreate")?;
        Ok(RawStream {
            raw,
            context: Arc::clone(context),
            foreign: None,
        })
    }

    /// A new non-blocking stream in `context` whose work the device schedules with
    /// `priority` (`cuStreamCreateWithPriority`: lower numbers are more urgent; the
    /// driver clamps a value outside [`priority_range`], which the caller checks first).
    pub(crate) fn with_priority(context: &Arc<PrimaryContext>, priority: i32) -> Result<Self> {
        let _bound = context.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint;
        // SAFETY: `raw` is a live out-pointer the driver writes the new stream to, in the
        // context bound above.
        unsafe { sys::cuStreamCreateWithPriority(&raw mut raw, flags, priority) }
            .result()
            .call("cuStreamCreateWithPriority")?;
        Ok(RawStream {
            raw,
            context: Arc::clone(context),
            foreign: None,
        })
    }

    /// The stream `raw` of another library, which `owner` keeps alive; dropping the
    /// returned value drops `owner` (with the context bound) and never destroys `raw`.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream object of `context` (not the legacy or per-thread default
    /// stream, whose handles mean a different stream depending on the current context or
    /// thread), and it is not destroyed while `owner` is alive.
    pub(super) unsafe fn foreign(
        context: &Arc<PrimaryContext>,
        raw: sys::CUstream,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        RawStream {
            raw,
            context: Arc::clone(context),
            foreign: Some(owner),
        }
    }

    /// `true` for a stream of another library ([`RawStream::foreign`]): code outside
    /// this crate may start a graph capture on it at any time, so whether it is being
    /// captured must be asked of the driver, never assumed.
    #[inline(always)]
    pub(crate) fn is_foreign(&self) -> bool {
        self.foreign.is_some()
    }

    /// The driver's handle (for calls that name the stream).
    #[inline(always)]
    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The stream's context.
    #[inline(always)]
    pub(crate) fn context(&self) -> &Arc<PrimaryContext> {
        &self.context
    }

    /// Makes the stream's context current until the guard drops.
    #[inline]
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        self.context.bind()
    }

    /// Blocks until all work enqueued on the stream so far has completed, under the
    /// stream's own context: directly when this thread is believed to have it current,
    /// and if that fails with an error that is not sticky (or it is not believed
    /// current), once more with the context bound for real (see
    /// [`context`](super::context)'s docs on the hint). `Ok` means the work has
    /// completed.
    #[inline]
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.context.run_as_current(|| self.synchronize_as_bound())
    }

    /// The common case of [`synchronize`](Self::synchronize), for a scope's exit: one
    /// `cuStreamSynchronize` when this thread is believed to have the stream's context
    /// current, `true` when it succeeded (all work enqueued so far has completed).
    /// `false` proves nothing (not believed current, or the call failed): call
    /// `synchronize`, which binds if it must and says why. A second synchronisation after
    /// a failed one is harmless: a sticky error is reported again, and a wrong context is
    /// what `synchronize` binds the right one for.
    #[inline]
    pub(crate) fn synchronized_at_once(&self) -> bool {
        // SAFETY: `self.raw` is a live stream (owned by `self`); the call names it, and
        // under a wrong current context it fails (reported as `false`).
        self.context.believed_current() && unsafe { result::stream::synchronize(self.raw) }.is_ok()
    }

    /// One `cuStreamSynchronize`, under whatever context is current.
    #[inline]
    fn synchronize_as_bound(&self) -> Result<()> {
        // SAFETY: `self.raw` is a live stream (owned by `self`); the call names it, and a
        // stream handle identifies its own context.
        unsafe { result::stream::synchronize(self.raw) }.call("cuStreamSynchronize")
    }

    /// `Ok(true)` when all work enqueued so far has completed, without blocking.
    pub(crate) fn is_idle(&self) -> Result<bool> {
        let _bound = self.bind()?;
        // SAFETY: `self.raw` is a live stream; a query only reads its state.
        match unsafe { sys::cuStreamQuery(self.raw) }.result() {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::driver("cuStreamQuery", e)),
        }
    }

    /// `Ok(true)` while the stream is being captured into a CUDA graph.
    /// Under the context hint, as [`synchronize`](Self::synchronize): a scope opening on a
    /// stream whose handle left the crate asks this every time.
    #[inline]
    pub(crate) fn is_capturing(&self) -> Result<bool> {
        let status = self.context.run_as_current(|| {
            // SAFETY: `self.raw` is a live stream; a query only reads its state, and under
            // a wrong current context it fails, which `run_as_current` retries bound.
            unsafe { result::stream::is_capturing(self.raw) }.call("cuStreamIsCapturing")
        })?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
}

/// A stream known only by its handle (one of the streams this thread's open scopes
/// borrow), for the out-of-memory retry's waits.
pub(crate) struct BorrowedStream<'a> {
    context: &'a Arc<PrimaryContext>,
    raw: sys::CUstream,
}

impl<'a> BorrowedStream<'a> {
    /// The stream `raw` of `context`.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `context` (not yet destroyed) as long as the value lives.
    pub(crate) unsafe fn new(context: &'a Arc<PrimaryContext>, raw: sys::CUstream) -> Self {
        BorrowedStream { context, raw }
    }

    /// Blocks until all work enqueued so far on the stream has completed, with its
    /// context bound.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let _bound = self.context.bind()?;
        // SAFETY: `self.raw` is live (`new`'s contract); its context is bound.
        unsafe { result::stream::synchronize(self.raw) }.call("cuStreamSynchronize")
    }

    /// The stream's context.
    #[inline]
    pub(super) fn context(&self) -> &Arc<PrimaryContext> {
        self.context
    }

    /// The driver's handle (live: `new`'s contract).
    #[inline]
    pub(super) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// `true` when all work enqueued so far has completed, without blocking; `false`
    /// while it runs, and when the query fails (the synchronisation after the wait
    /// reports why).
    pub(crate) fn is_idle(&self) -> bool {
        let Ok(_bound) = self.context.bind() else {
            return true;
        };
        // SAFETY: `self.raw` is live (`new`'s contract); a query only reads its state.
        let queried = unsafe { sys::cuStreamQuery(self.raw) };
        queried != sys::CUresult::CUDA_ERROR_NOT_READY
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        let _bound = self.context.bind();
        if let Some(owner) = self.foreign.take() {
            // Not ours to destroy: hand the owner back (inside the binding, so that an
            // owner whose drop binds its context finds it current and displaces nothing).
            drop(owner);
            return;
        }
        // SAFETY: created by `cuStreamCreate` in `new`, destroyed once, here, with its
        // context (kept alive by `self`) bound (see the type's docs for work still
        // queued). A failure only leaks the stream.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// The stream priorities `context`'s device offers, as `(least, greatest)`: the number
/// of the least urgent (the default, 0) and of the most urgent (`cuCtxGetStreamPriorityRange`;
/// lower numbers are more urgent, so `greatest <= least`).
pub(crate) fn priority_range(context: &Arc<PrimaryContext>) -> Result<(i32, i32)> {
    let _bound = context.bind()?;
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: two live `int`s the driver writes, in the context bound above.
    unsafe { sys::cuCtxGetStreamPriorityRange(&raw mut least, &raw mut greatest) }
        .result()
        .call("cuCtxGetStreamPriorityRange")?;
    Ok((least, greatest))
}
